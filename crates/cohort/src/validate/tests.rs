//! `validate()` on a real database, from inside the crate: what the public
//! API cannot show (the resolved entities and their order, X16) and the
//! catalog queries under a hostile `search_path` without the builder's pin.

use cohort_testdb::TestDb;
use futures_util::future::BoxFuture;
use sqlx::Row;
use uuid::Uuid;

use super::{Model, Registration, validate};
use crate::catalog;
use crate::config::Options;
use crate::error::Error;
use crate::model::{
    AnonymiseMethod, AnonymisedField, EntityDescriptor, FieldDescriptor, Markers, Membership,
};
use crate::policy::{Capabilities, ProviderError, ResolutionContext, Rule, RuleProvider, Strategy};

struct Rules;

impl RuleProvider for Rules {
    fn capabilities(&self, category: &str) -> Option<Capabilities> {
        match category {
            "purge" => Some(Capabilities::only(Strategy::Purge)),
            "anon" => Some(Capabilities::only(Strategy::Anonymise).and(Strategy::Purge)),
            _ => None,
        }
    }

    fn resolve<'a>(
        &'a self,
        _ctx: ResolutionContext<'a>,
    ) -> BoxFuture<'a, Result<Option<Rule>, ProviderError>> {
        Box::pin(async { Ok(None) })
    }
}

const fn f(field: &'static str) -> FieldDescriptor {
    FieldDescriptor {
        field,
        column: field,
        optional: false,
        rust_type: "_",
    }
}

const NO_MARKERS: Markers = Markers {
    record_id: None,
    tenant: None,
    soft_delete: None,
    deleted_at: None,
    anonymised_at: None,
};

const CONVENTIONAL: [FieldDescriptor; 3] = [f("id"), f("tenant_id"), f("created_at")];

/// A purged type on `table` with the conventional fields.
const fn plain(type_name: &'static str, id: u128, table: &'static str) -> EntityDescriptor {
    EntityDescriptor {
        type_name,
        membership: Membership::Retained {
            category: "purge",
            anchor: "created_at",
        },
        entity_id: Some(Uuid::from_u128(id)),
        table,
        schema: None,
        tenantless: false,
        fields: &CONVENTIONAL,
        markers: NO_MARKERS,
        anonymise: &[],
        erasure_subjects: &[],
        guard: None,
        category_from: None,
        event_key: None,
    }
}

static PARENT: EntityDescriptor = plain("Parent", 1, "parents");
static UNRELATED: EntityDescriptor = plain("Unrelated", 2, "unrelated");
static GRANDCHILD: EntityDescriptor = plain("GrandChild", 4, "grandchildren");
static CHILD: EntityDescriptor = EntityDescriptor {
    type_name: "Child",
    membership: Membership::Retained {
        category: "anon",
        anchor: "created_at",
    },
    entity_id: Some(Uuid::from_u128(3)),
    table: "children",
    schema: None,
    tenantless: false,
    fields: &[
        f("id"),
        f("tenant_id"),
        f("created_at"),
        f("anonymised_at"),
        f("email"),
        FieldDescriptor {
            field: "subject",
            column: "subject_ref",
            optional: false,
            rust_type: "_",
        },
    ],
    markers: NO_MARKERS,
    anonymise: &[AnonymisedField {
        field: "email",
        method: AnonymiseMethod::Literal("x"),
    }],
    erasure_subjects: &["subject"],
    guard: None,
    category_from: None,
    event_key: None,
};

const TABLES: &str = r#"
    CREATE DOMAIN tenant AS uuid NOT NULL;
    CREATE TABLE parents (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
    CREATE TABLE unrelated (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz);
    CREATE TABLE children (id bigint PRIMARY KEY, tenant_id tenant, created_at timestamptz(3) NOT NULL,
        anonymised_at timestamptz, email varchar(20), subject_ref numeric(10, 0),
        parent_id uuid REFERENCES parents ON DELETE RESTRICT);
    CREATE TABLE grandchildren (id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz,
        child_id bigint REFERENCES children);
    -- Not retained: something for every catalog query to find.
    CREATE TABLE base_x (a int);
    CREATE TABLE derived_x (b int) INHERITS (base_x);
    CREATE TABLE parted_x (k int, r tsrange[], n int NOT NULL UNIQUE) PARTITION BY HASH (n);
    CREATE TABLE parted_x0 PARTITION OF parted_x FOR VALUES WITH (MODULUS 1, REMAINDER 0);
    CREATE TABLE notes_x (id int, parent_id uuid REFERENCES unrelated ON DELETE CASCADE,
        n int REFERENCES parted_x (n) ON DELETE CASCADE);
"#;

/// Every catalog query's answer about the tables in [`TABLES`].
async fn catalog_answers(conn: &mut sqlx::PgConnection) -> String {
    let names: Vec<(String, String)> = [
        "parents",
        "children",
        "base_x",
        "derived_x",
        "parted_x",
        "parted_x0",
        "nope",
    ]
    .iter()
    .map(|t| ("public".to_owned(), t.to_string()))
    .chain([("evil".to_owned(), "children".to_owned())])
    .collect();
    let mut lookups = catalog::lookup_tables(conn, &names).await.expect("tables");
    let mut oids = Vec::new();
    let mut type_oids = Vec::new();
    for lookup in &mut lookups {
        if let catalog::RelationLookup::Table(t) = lookup {
            oids.push(t.oid);
            for c in &mut t.columns {
                type_oids.push(c.type_oid);
                // Printed per search_path (see `check`): compared elsewhere.
                c.sql_type.clear();
            }
        }
    }
    let mut types: Vec<_> = catalog::types(conn, &type_oids)
        .await
        .expect("types")
        .into_iter()
        .collect();
    types.sort_by_key(|(oid, _)| *oid);
    let indexes = catalog::indexes(conn, &oids).await.expect("indexes");
    let links = catalog::inheritance(conn, &oids)
        .await
        .expect("inheritance");
    let keys = catalog::foreign_keys(conn).await.expect("foreign keys");
    assert!(
        indexes.len() == 4 && links.len() == 2 && keys.len() == 4,
        "{indexes:?} {links:?} {keys:?}"
    );
    format!("{lookups:?}\n{types:?}\n{indexes:?}\n{links:?}\n{keys:?}")
}

async fn run(conn: &mut sqlx::PgConnection) -> Result<Model, Error> {
    let descriptors = [&PARENT, &UNRELATED, &CHILD, &GRANDCHILD];
    let options = Options::default();
    validate(
        conn,
        &Registration {
            descriptors: &descriptors,
            options: &options,
            provider: &Rules,
            anonymisers: &Default::default(),
            row_handlers: false,
            captured: None,
        },
    )
    .await
}

/// `tenant_type`: how `format_type` prints the domain, which depends on the
/// session's `search_path` (the only thing that does: why callers pin it).
fn check(model: &Model, tenant_type: &str) {
    // X16: children before the types they reference; registration order otherwise.
    let order: Vec<&str> = model.entities.iter().map(|e| e.type_name()).collect();
    assert_eq!(order, ["Unrelated", "GrandChild", "Child", "Parent"]);

    let child = &model.entities[2];
    assert_eq!(child.entity_id, Uuid::from_u128(3));
    assert_eq!(child.category, "anon");
    assert!(child.capabilities.allows(Strategy::Anonymise));
    assert_eq!(child.table.to_string(), r#""public"."children""#);
    let columns = |c: &crate::model::resolved::Column| {
        (c.name.as_str().to_owned(), c.sql_type.clone(), c.nullable)
    };
    assert_eq!(
        columns(&child.record_id),
        ("id".into(), "bigint".into(), false)
    );
    assert_eq!(
        columns(&child.anchor),
        (
            "created_at".into(),
            "timestamp(3) with time zone".into(),
            false
        )
    );
    // A NOT NULL domain makes the column not nullable.
    let tenant = child.tenant.as_ref().expect("tenant");
    assert_eq!(
        columns(tenant),
        ("tenant_id".into(), tenant_type.into(), false)
    );
    let anonymised_at = child.anonymised_at.as_ref().expect("anonymised_at");
    assert_eq!(
        columns(anonymised_at),
        (
            "anonymised_at".into(),
            "timestamp with time zone".into(),
            true
        )
    );
    assert!(child.soft_delete.is_none() && child.deleted_at.is_none());
    assert_eq!(child.anonymise.len(), 1);
    assert_eq!(
        columns(&child.anonymise[0].column),
        ("email".into(), "character varying(20)".into(), true)
    );
    assert!(matches!(
        child.anonymise[0].method,
        AnonymiseMethod::Literal("x")
    ));
    assert_eq!(child.subjects.len(), 1);
    assert_eq!(
        columns(&child.subjects[0]),
        ("subject_ref".into(), "numeric(10,0)".into(), true)
    );
    assert!(model.exempt.is_empty());
}

#[tokio::test]
async fn resolved_entities_are_complete_and_referencing_types_come_first() {
    let db = TestDb::new().await;
    db.exec(TABLES).await;
    let mut conn = db.pool().acquire().await.expect("connection");
    let mut tx = crate::sql::Pinned::begin(&mut conn).await.expect("begin");
    // As the builder does: only pg_catalog on the path while reading the catalog.
    crate::sql::query(crate::sql::CATALOG_ONLY_SEARCH_PATH)
        .execute(tx.conn())
        .await
        .expect("catalog path");
    let model = run(tx.conn()).await.expect("valid model");
    tx.rollback().await;
    check(&model, "public.tenant");
}

#[tokio::test]
async fn catalog_queries_are_immune_to_a_hostile_search_path_even_unpinned() {
    let db = TestDb::new().await;
    db.exec(TABLES).await;
    db.exec(&format!(
        r#"
        CREATE SCHEMA evil;
        -- Look-alike host tables, and catalog relations, functions and operators
        -- that shadow pg_catalog's for any unqualified use.
        CREATE TABLE evil.children (id text, tenant_id text, created_at timestamp);
        CREATE VIEW evil.pg_class AS SELECT * FROM pg_catalog.pg_class WHERE false;
        CREATE VIEW evil.pg_attribute AS SELECT attrelid, attnum, attname, atttypid, atttypmod,
            attnotnull, attisdropped FROM pg_catalog.pg_attribute WHERE false;
        CREATE VIEW evil.pg_type AS SELECT * FROM pg_catalog.pg_type WHERE false;
        CREATE VIEW evil.pg_index AS SELECT * FROM pg_catalog.pg_index WHERE false;
        CREATE VIEW evil.pg_inherits AS SELECT * FROM pg_catalog.pg_inherits WHERE false;
        CREATE VIEW evil.pg_constraint AS SELECT * FROM pg_catalog.pg_constraint WHERE false;
        CREATE FUNCTION evil.format_type(oid, integer) RETURNS text LANGUAGE sql AS $$ SELECT 'garbage' $$;
        CREATE FUNCTION evil.pg_partition_root(regclass) RETURNS regclass LANGUAGE sql AS $$ SELECT 0::oid::regclass $$;
        CREATE FUNCTION evil.same_name(name, name) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
        CREATE OPERATOR evil.= (LEFTARG = name, RIGHTARG = name, FUNCTION = evil.same_name);
        CREATE FUNCTION evil.same_oid(oid, oid) RETURNS boolean LANGUAGE sql AS $$ SELECT true $$;
        CREATE OPERATOR evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = evil.same_oid);
        ALTER DATABASE "{}" SET search_path = evil, pg_catalog, public;
        "#,
        db.name()
    ))
    .await;
    let mut conn = db.connect().await;
    // The shadowing is really in effect on this connection.
    let shadowed: String = crate::sql::query("SELECT format_type(23, -1)")
        .fetch_one(&mut conn)
        .await
        .expect("query")
        .get(0);
    assert_eq!(shadowed, "garbage");
    // No pin: every query must stand on its own qualification, and answer
    // exactly what it answers with search_path pinned.
    let model = run(&mut conn).await.expect("valid model");
    check(&model, "tenant");
    let hostile = catalog_answers(&mut conn).await;
    let mut tx = crate::sql::Pinned::begin(&mut conn).await.expect("begin");
    let pinned = catalog_answers(tx.conn()).await;
    tx.rollback().await;
    assert_eq!(hostile, pinned);
    assert!(
        pinned.contains("NotATable") || pinned.contains("Missing"),
        "{pinned}"
    );
}
