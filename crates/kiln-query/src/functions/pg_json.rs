//! PostgreSQL's `json_build_object(key, value, ...)`: one JSON object per
//! row, as text. SQLAlchemy's column reflection (and so Superset's dataset
//! editor and pandas' `read_sql_table`) calls it in every `get_columns`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, StringBuilder};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct JsonBuildObject {
    signature: Signature,
}

impl Default for JsonBuildObject {
    fn default() -> Self {
        Self {
            signature: Signature::variadic_any(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if !args.len().is_multiple_of(2) {
            return plan_err!("json_build_object: arguments must alternate keys and values");
        }
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let columns: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<Result<_>>()?;
        let mut out = StringBuilder::with_capacity(rows, rows * 32);
        let mut object = String::new();
        for row in 0..rows {
            object.clear();
            object.push('{');
            for (i, pair) in columns.chunks(2).enumerate() {
                let (key, value) = (&pair[0], &pair[1]);
                if is_null(key, row) {
                    return exec_err!("json_build_object: argument {} (a key) is null", 2 * i + 1);
                }
                if i > 0 {
                    object.push_str(", ");
                }
                push_string(&mut object, &text(key, row)?);
                object.push_str(" : ");
                push_value(&mut object, value, row)?;
            }
            object.push('}');
            out.append_value(&object);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// Whether row `row` of `array` is NULL (a NULL literal is an array of
/// type `Null`, which keeps no null flags).
fn is_null(array: &ArrayRef, row: usize) -> bool {
    array.data_type() == &DataType::Null || array.is_null(row)
}

/// Row `row` of `array` as text.
fn text(array: &ArrayRef, row: usize) -> Result<String> {
    let one = cast(&array.slice(row, 1), &DataType::Utf8)?;
    Ok(ScalarValue::try_from_array(&one, 0)?.to_string())
}

/// Row `row` of `array` as a JSON value: numbers and booleans bare, NULL
/// as `null`, anything else as a string.
fn push_value(out: &mut String, array: &ArrayRef, row: usize) -> Result<()> {
    if is_null(array, row) {
        out.push_str("null");
        return Ok(());
    }
    let t = array.data_type();
    if t.is_numeric() || matches!(t, DataType::Boolean) {
        let v = text(array, row)?;
        match v.as_str() {
            // JSON has no spelling for these; PostgreSQL writes them as strings.
            "NaN" | "inf" | "-inf" | "Infinity" | "-Infinity" => push_string(out, &v),
            _ => out.push_str(&v),
        }
    } else {
        push_string(out, &text(array, row)?);
    }
    Ok(())
}

/// `s` as a JSON string.
fn push_string(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    #[tokio::test]
    async fn builds_one_object_per_row_with_typed_values() {
        let ctx = SessionContext::new();
        ctx.register_udf(crate::functions::udf(JsonBuildObject::default()));
        let batches = ctx
            .sql(
                "SELECT json_build_object('n', v, 'ok', v > 1, 's', 'a\"b', 'none', NULL) AS j \
                 FROM (VALUES (1), (2)) t(v) ORDER BY v",
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let j = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        assert!(
            j.contains(r#"{"n" : 1, "ok" : false, "s" : "a\"b", "none" : null}"#),
            "{j}"
        );
        assert!(j.contains(r#"{"n" : 2, "ok" : true"#), "{j}");
        assert!(ctx.sql("SELECT json_build_object('k')").await.is_err());
    }
}
