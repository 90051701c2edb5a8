//! Which values a column can hold, where the catalog says (contract SL3): an
//! enum type's labels, and the list of a `CHECK` constraint on the column
//! alone that only compares it with literals (`col IN ('a', 'b')`, which
//! PostgreSQL keeps as `col = ANY (ARRAY['a', 'b'])`, or `=` joined by
//! `OR`).

use sqlx::PgConnection;
use sqlx::Row;
use sqlx::postgres::types::Oid;

/// What bounds one column's values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// The labels of its enum type (through domains), in order.
    pub(crate) labels: Option<Vec<String>>,
    /// The values a `CHECK` constraint on it allows, when one lists them.
    pub(crate) listed: Option<Vec<String>>,
}

/// Reads the bounds of column `attnum` of table `table_oid`.
pub(crate) async fn bounds(
    conn: &mut PgConnection,
    table_oid: u32,
    attnum: i16,
) -> Result<Bounds, sqlx::Error> {
    let labels: Vec<String> = crate::sql::query_scalar(
        "WITH RECURSIVE ty(oid, base, depth) AS ( \
             SELECT t.oid, t.typbasetype, 0 FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) a.atttypid \
             WHERE a.attrelid OPERATOR(pg_catalog.=) $1::pg_catalog.oid \
               AND a.attnum OPERATOR(pg_catalog.=) $2::pg_catalog.int2 \
           UNION ALL \
             SELECT t.oid, t.typbasetype, ty.depth OPERATOR(pg_catalog.+) 1 FROM ty \
             JOIN pg_catalog.pg_type t ON t.oid OPERATOR(pg_catalog.=) ty.base \
             WHERE ty.base OPERATOR(pg_catalog.<>) 0 AND ty.depth OPERATOR(pg_catalog.<) 16) \
         SELECT e.enumlabel::pg_catalog.text FROM pg_catalog.pg_enum e \
         WHERE e.enumtypid OPERATOR(pg_catalog.=) ANY (SELECT ty.oid FROM ty) \
         ORDER BY e.enumsortorder",
    )
    .bind(Oid(table_oid))
    .bind(attnum)
    .fetch_all(&mut *conn)
    .await?;
    let checks = crate::sql::query(
        "SELECT pg_catalog.pg_get_expr(c.conbin, c.conrelid) AS expr FROM pg_catalog.pg_constraint c \
         WHERE c.conrelid OPERATOR(pg_catalog.=) $1::pg_catalog.oid \
           AND c.contype OPERATOR(pg_catalog.=) 'c' \
           AND c.conkey OPERATOR(pg_catalog.=) ARRAY[$2::pg_catalog.int2]",
    )
    .bind(Oid(table_oid))
    .bind(attnum)
    .fetch_all(&mut *conn)
    .await?;
    let mut listed: Option<Vec<String>> = None;
    for row in checks {
        let expr: String = row.try_get("expr")?;
        if let Some(values) = literal_list(&expr) {
            // Several such constraints: a value must pass them all.
            listed = Some(match listed {
                None => values,
                Some(before) => before.into_iter().filter(|v| values.contains(v)).collect(),
            });
        }
    }
    Ok(Bounds {
        labels: (!labels.is_empty()).then_some(labels),
        listed,
    })
}

/// The literals of a check expression that only compares one column with
/// literals for equality (`= ANY (ARRAY[...])` or `=` joined by `OR`);
/// `None` for any other expression.
fn literal_list(expr: &str) -> Option<Vec<String>> {
    let mut values = Vec::new();
    let mut rest = String::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            let mut value = String::new();
            loop {
                match chars.next()? {
                    '\'' if chars.peek() == Some(&'\'') => {
                        chars.next();
                        value.push('\'');
                    }
                    '\'' => break,
                    other => value.push(other),
                }
            }
            values.push(value);
            rest.push('L');
        } else {
            rest.push(c);
        }
    }
    // What is left may only be the column, casts, `=`, `ANY (ARRAY[...])`,
    // `OR` and parentheses.
    let forbidden = [
        "<", ">", "!", "~", " AND ", "NOT ", "LIKE", "IS ", "BETWEEN", "<>",
    ];
    if values.is_empty()
        || !rest.contains('=')
        || forbidden
            .iter()
            .any(|f| rest.to_ascii_uppercase().contains(f))
    {
        return None;
    }
    Some(values)
}

#[cfg(test)]
mod tests {
    use super::literal_list;

    #[test]
    fn an_in_list_and_an_or_of_equalities_give_their_values_and_other_checks_none() {
        assert_eq!(
            literal_list("(kind = ANY (ARRAY['invoice'::text, 'it''s'::text]))"),
            Some(vec!["invoice".to_owned(), "it's".to_owned()])
        );
        assert_eq!(
            literal_list("((kind = 'a'::text) OR (kind = 'b'::text))"),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(literal_list("(length(kind) > 2)"), None);
        assert_eq!(literal_list("((kind <> 'a'::text))"), None);
        assert_eq!(
            literal_list("((kind = 'a'::text) AND (x = 'b'::text))"),
            None
        );
        assert_eq!(literal_list("(kind IS NOT NULL)"), None);
    }
}
