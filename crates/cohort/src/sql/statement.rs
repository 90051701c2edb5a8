//! Statements whose bind parameters are allocated by role.
//!
//! A statement builder asks for a placeholder by naming the value it needs
//! (`b.p(Param::Tenant)` gives `$1`, and `$1` again the next time); the
//! statement keeps the list, and the executor binds the values in that order.
//! Placeholders therefore never drift from the values bound to them, and a
//! statement binds exactly the values its text uses.

/// SQL text and the roles of its bind parameters, in placeholder order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Statement<P> {
    pub(crate) text: String,
    pub(crate) params: Vec<P>,
}

/// Hands out placeholders by role while a statement is written.
#[derive(Debug)]
pub(crate) struct Params<P> {
    params: Vec<P>,
}

impl<P: Copy + PartialEq> Params<P> {
    pub(crate) fn new() -> Params<P> {
        Params { params: Vec::new() }
    }

    /// The placeholder of `param`: the same one each time it is asked for.
    pub(crate) fn p(&mut self, param: P) -> String {
        let index = match self.params.iter().position(|q| *q == param) {
            Some(i) => i,
            None => {
                self.params.push(param);
                self.params.len() - 1
            }
        };
        format!("${}", index + 1)
    }

    /// The finished statement.
    pub(crate) fn finish(self, text: String) -> Statement<P> {
        Statement {
            text,
            params: self.params,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_keeps_its_placeholder() {
        let mut b = Params::new();
        assert_eq!(b.p('a'), "$1");
        assert_eq!(b.p('b'), "$2");
        assert_eq!(b.p('a'), "$1");
        let s = b.finish("x".into());
        assert_eq!(s.params, vec!['a', 'b']);
    }
}
