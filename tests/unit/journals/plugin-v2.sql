BEGIN TRANSACTION;
CREATE TABLE effects (
    partition TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    effect_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    before_json TEXT,
    outputs_json TEXT,
    detail TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 0,
    checksum TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (partition, operation_id, effect_id),
    UNIQUE (partition, operation_id, position),
    FOREIGN KEY (partition, operation_id) REFERENCES operations (partition, operation_id)
);
INSERT INTO "effects" VALUES('links/vlan','op-1','e0',0,'linux/create-vlan/v1','Applied','{}','{"x": 1}','',1,'5fea5ee801bc9dee1e55d957cee372fa');
INSERT INTO "effects" VALUES('links/vlan','op-1','e1',1,'linux/create-vlan/v1','Applying','{"a": 2}',NULL,'seen',2,'672b5855492b51f9615d6706a1bb7903');
INSERT INTO "effects" VALUES('links/vlan','op-1','e2',2,'linux/create-vlan/v1','Planned',NULL,NULL,'',0,'a61fd53e695b92064e2562cdd3ef902b');
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
INSERT INTO "meta" VALUES('format','dra-networkplugins/journal');
INSERT INTO "meta" VALUES('journal_id','cc6b8561-ef5b-4d24-9e24-985302018a12');
INSERT INTO "meta" VALUES('schema_version','2');
INSERT INTO "meta" VALUES('last_seq','2');
INSERT INTO "meta" VALUES('commits','1');
CREATE TABLE operations (
    partition TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    seq INTEGER NOT NULL UNIQUE,
    hook TEXT NOT NULL,
    scope TEXT NOT NULL,
    step TEXT NOT NULL,
    semantic_digest TEXT NOT NULL,
    artifact_digest TEXT NOT NULL,
    contract_digest TEXT NOT NULL,
    generation INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    request_json TEXT NOT NULL,
    plan_json TEXT,
    state TEXT NOT NULL,
    response_json TEXT,
    error_json TEXT,
    target_operation_id TEXT NOT NULL DEFAULT '',
    cleanup_status TEXT,
    checksum TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (partition, operation_id)
);
INSERT INTO "operations" VALUES('links/vlan','op-1',1,'ConnectNetwork','att-1','vlan0','sem-1','sha256:artifact','sha256:contract',1,1,'{"op": 1}','{"effects": []}','Failed',NULL,'{"m": "x"}','',NULL,'42d83258bf2386b91b19cb0e54f65e10');
INSERT INTO "operations" VALUES('links/vlan','op-2',2,'ConnectNetwork','att-2','vlan0','sem-2','sha256:artifact','sha256:contract',1,1,'{"op": 1}','{"effects": []}','Succeeded','{"r": 1}',NULL,'',NULL,'9635560048a08aaf3d485ffcd6c0eb17');
CREATE TABLE scopes (
    partition TEXT NOT NULL,
    scope TEXT NOT NULL,
    generation INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    fence_operation_id TEXT NOT NULL DEFAULT '',
    checksum TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (partition, scope)
);
INSERT INTO "scopes" VALUES('links/vlan','att-1',1,1,'','a4e9be12ae0c10f66454475424d8b0a1');
CREATE INDEX operations_by_scope ON operations (partition, scope, seq);
CREATE INDEX operations_by_state ON operations (state, seq);
COMMIT;
