"""Simulators of the Kubernetes node's peers (kubelet, API server, NRI runtime), written from the public protocols; test kit, not product."""
