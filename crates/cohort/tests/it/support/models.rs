//! Host types used across the engine tests (the seeds' README example).
#![allow(dead_code, unreachable_pub)]

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub const NOTE_ID: &str = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8";
pub const CONTACT_ID: &str = "b7316df4-7db5-46ad-aea7-f65c4b430f73";

#[derive(cohort::Retained)]
#[cohort(
    category = "session-notes",
    anchor = "created_at",
    id = "a3f467fe-c5d0-4f17-9897-83c373cc1dc8",
    table = "session_notes"
)]
pub struct SessionNote {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub body: String,
}

pub struct Scramble;
impl cohort::Anonymiser for Scramble {
    fn anonymise(original: Option<&str>) -> Option<String> {
        original.map(|o| format!("anon-{}", o.len()))
    }
}

#[derive(cohort::Retained)]
#[cohort(
    category = "case-contacts",
    anchor = "created_at",
    id = "b7316df4-7db5-46ad-aea7-f65c4b430f73",
    table = "case_contacts"
)]
pub struct CaseContact {
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    pub email: Option<String>,
    #[cohort(anonymise = "empty")]
    pub full_name: String,
    #[cohort(anonymise(literal = "[redacted]"))]
    pub phone: String,
    #[cohort(anonymise_with = Scramble)]
    pub external_ref: String,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "tickets",
    anchor = "opened_at",
    id = "5d1c1b8e-2f7a-4b7e-9d8a-0c2a44f0e001",
    table = "tickets"
)]
pub struct Ticket {
    pub id: i64,
    pub tenant_id: Uuid,
    pub opened_at: Option<DateTime<Utc>>,
    pub is_deleted: bool,
    pub deleted_at: Option<DateTime<Utc>>,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "audit-log",
    anchor = "logged_at",
    id = "9e7a3c52-6a1d-4f0c-8b1e-7d2f3a4b5c6d",
    table = "system_log",
    tenantless
)]
pub struct SystemLog {
    pub id: i64,
    pub logged_at: DateTime<Utc>,
    pub line: String,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "user-data",
    anchor = "created_at",
    id = "6b619c19-6e3c-44e8-a87f-975c68fd3988",
    table = "user_records"
)]
pub struct UserRecord {
    pub id: i64,
    pub tenant_id: Uuid,
    pub created_at: Option<DateTime<Utc>>,
    #[cohort(erasure_subject)]
    pub user_id: Uuid,
    #[cohort(erasure_subject)]
    pub delegate_user_id: Option<Uuid>,
    pub anonymised_at: Option<DateTime<Utc>>,
    #[cohort(anonymise = "null")]
    pub notes: Option<String>,
    pub is_deleted: bool,
}

#[derive(cohort::Retained)]
#[cohort(
    category = "messages",
    anchor = "sent_at",
    id = "0b7e3f7c-0d47-4a3c-9f2e-5a8e2c1d9b10",
    table = "messages"
)]
pub struct Message {
    pub id: i64,
    pub tenant_id: Uuid,
    pub sent_at: DateTime<Utc>,
    #[cohort(erasure_subject)]
    pub sender_email: String,
}

pub const TABLES: &str = r#"
CREATE TABLE public.user_records (
    id bigint PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz, user_id uuid NOT NULL,
    delegate_user_id uuid, anonymised_at timestamptz, notes text, is_deleted boolean NOT NULL DEFAULT false);
CREATE TABLE public.messages (id bigint PRIMARY KEY, tenant_id uuid NOT NULL, sent_at timestamptz NOT NULL,
    sender_email text NOT NULL);
CREATE TABLE public.session_notes (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, body text NOT NULL);
CREATE INDEX ON public.session_notes (tenant_id, created_at, id);
CREATE TABLE public.case_contacts (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, created_at timestamptz NOT NULL, anonymised_at timestamptz,
    email text, full_name text NOT NULL, phone text NOT NULL, external_ref text NOT NULL);
CREATE TABLE public.tickets (
    id bigint PRIMARY KEY, tenant_id uuid NOT NULL, opened_at timestamptz, is_deleted boolean NOT NULL DEFAULT false,
    deleted_at timestamptz);
CREATE TABLE public.system_log (id bigint PRIMARY KEY, logged_at timestamptz NOT NULL, line text NOT NULL);
"#;

pub fn uuid(s: &str) -> Uuid {
    Uuid::parse_str(s).expect("uuid literal")
}
