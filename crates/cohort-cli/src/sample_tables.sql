CREATE TABLE users (
    id uuid PRIMARY KEY,
    tenant_id uuid NOT NULL,
    email text,
    full_name text NOT NULL,
    phone text,
    last_seen_at timestamptz,
    anonymised_at timestamptz
);
CREATE INDEX users_tenant_seen ON users (tenant_id, last_seen_at);
CREATE TABLE orders (
    id bigint PRIMARY KEY,
    tenant_id uuid NOT NULL,
    user_id uuid NOT NULL,
    total_cents bigint NOT NULL,
    shipping_address text,
    placed_at timestamptz NOT NULL
);
CREATE INDEX orders_tenant_placed ON orders (tenant_id, placed_at);
CREATE INDEX orders_user ON orders (user_id);
CREATE TABLE sessions (
    id uuid PRIMARY KEY,
    tenant_id uuid NOT NULL,
    user_id uuid NOT NULL,
    ip inet,
    user_agent text,
    created_at timestamptz NOT NULL
);
CREATE INDEX sessions_tenant_created ON sessions (tenant_id, created_at);
CREATE INDEX sessions_user ON sessions (user_id);
CREATE TABLE audit_notes (
    id bigint PRIMARY KEY,
    tenant_id uuid NOT NULL,
    body text NOT NULL,
    created_at timestamptz NOT NULL,
    is_deleted boolean NOT NULL DEFAULT false,
    deleted_at timestamptz
);
CREATE INDEX audit_notes_tenant_created ON audit_notes (tenant_id, created_at);
CREATE TABLE countries (
    code text PRIMARY KEY,
    name text NOT NULL
);
