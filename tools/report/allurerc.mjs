// Allure 3 configuration for the rig's report: one self-contained HTML file, so the
// report opens from disk (file://) and travels as a single CI artifact.
export default {
  name: "dra-networkplugins conformance rig",
  plugins: {
    awesome: {
      options: {
        singleFile: true,
        reportLanguage: "en",
      },
    },
  },
};
