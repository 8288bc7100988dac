//! PostgreSQL's `quote_literal(text)`: the text as a SQL string literal,
//! quotes doubled (and, with a backslash in it, backslashes doubled in an
//! `E'...'` literal); NULL stays NULL. Grafana's template variable queries
//! use it (`SELECT DISTINCT quote_literal(host) FROM ...`).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct QuoteLiteral {
    signature: Signature,
}

impl Default for QuoteLiteral {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

/// `text` as PostgreSQL's `quote_literal` writes it.
pub fn quote_literal(text: &str) -> String {
    let quoted = text.replace('\'', "''");
    match quoted.contains('\\') {
        true => format!("E'{}'", quoted.replace('\\', "\\\\")),
        false => format!("'{quoted}'"),
    }
}

impl ScalarUDFImpl for QuoteLiteral {
    fn name(&self) -> &str {
        "quote_literal"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        super::map_text(&args.args[0], quote_literal)
    }
}

#[cfg(test)]
mod tests {
    use super::quote_literal;

    #[test]
    fn text_is_quoted_as_postgresql_quotes_it() {
        assert_eq!(quote_literal("web-1"), "'web-1'");
        assert_eq!(quote_literal("O'Reilly"), "'O''Reilly'");
        assert_eq!(quote_literal(r"a\b"), r"E'a\\b'");
        assert_eq!(quote_literal(""), "''");
    }
}
