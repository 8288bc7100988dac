//! PostgreSQL's `format(formatstr, args...)`: `%s`, `%I`, `%L`, `%%`,
//! positions and widths, every argument printed as PostgreSQL prints it
//! (timestamps `2026-01-01 00:00:00`, booleans `t`/`f`). Metabase's sync
//! builds each column's type name with it, one row per column.
//!
//! The format grammar is datafusion-pg-functions' `format`, which takes
//! scalar arguments only and prints some types differently; this wrapper
//! prints each argument as text first and calls it once per row (or once,
//! when every argument is a constant). Before each row it bounds the
//! result from the texts, as [`super::sized`] bounds `repeat`: widths and
//! repeated positions could ask for gigabytes from a short statement.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder};
use arrow::datatypes::{DataType, Field};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
};

use super::sized::{MAX_CALL_BYTES, MAX_VALUE_BYTES};

/// `format` over datafusion-pg-functions' own.
pub fn udf() -> ScalarUDF {
    super::udf(PgTextFormat {
        inner: datafusion_pg_functions::string::format::create_format_udf(),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct PgTextFormat {
    inner: ScalarUDF,
}

/// Each value of `a` as PostgreSQL's text output writes it (None: NULL).
fn as_text(a: &ArrayRef) -> Result<Vec<Option<String>>> {
    let rows = 0..a.len();
    Ok(match a.data_type() {
        DataType::Null => rows.map(|_| None).collect(),
        DataType::Boolean => {
            let b = a.as_boolean();
            rows.map(|i| {
                b.is_valid(i)
                    .then(|| if b.value(i) { "t" } else { "f" }.to_string())
            })
            .collect()
        }
        _ => {
            let options = FormatOptions::default()
                .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S%.f"))
                .with_timestamp_tz_format(Some("%Y-%m-%d %H:%M:%S%.f%:z"))
                .with_date_format(Some("%Y-%m-%d"));
            let f = ArrayFormatter::try_new(a.as_ref(), &options)?;
            rows.map(|i| a.is_valid(i).then(|| f.value(i).to_string()))
                .collect()
        }
    })
}

/// The specifiers of a `format` string, the sum of their written widths,
/// and how many take their width from an argument (`*`); None when a
/// specifier without a position follows one with a position.
fn format_widths(f: &str) -> Option<(i64, i64, i64)> {
    let b = f.as_bytes();
    let number = |mut i: usize| {
        let mut n: i64 = 0;
        while i < b.len() && b[i].is_ascii_digit() {
            n = n.saturating_mul(10).saturating_add(i64::from(b[i] - b'0'));
            i += 1;
        }
        (n, i)
    };
    let (mut specifiers, mut widths, mut stars) = (0i64, 0i64, 0i64);
    let mut positioned = false;
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        i += 1;
        if b.get(i) == Some(&b'%') {
            i += 1;
            continue;
        }
        specifiers += 1;
        // `N$`: a position, not a width.
        let (_, j) = number(i);
        if b.get(j) == Some(&b'$') {
            i = j + 1;
            positioned = true;
        } else if positioned {
            return None;
        }
        if b.get(i) == Some(&b'-') {
            i += 1;
        }
        if b.get(i) == Some(&b'*') {
            stars += 1;
            let (_, j) = number(i + 1);
            i = if b.get(j) == Some(&b'$') {
                j + 1
            } else {
                i + 1
            };
        } else {
            let (width, j) = number(i);
            widths = widths.saturating_add(width);
            i = j;
        }
    }
    Some((specifiers, widths, stars))
}

/// Row `row` of an argument's texts: a scalar's one text for every row.
fn at(texts: &[Option<String>], row: usize) -> &Option<String> {
    &texts[if texts.len() == 1 { 0 } else { row }]
}

impl PgTextFormat {
    /// Refuses row `row` before it is built if its result could pass
    /// [`MAX_VALUE_BYTES`]: at most the format's length, plus each
    /// specifier's width (a `*` width at most the largest integer
    /// argument), plus each specifier's longest argument.
    fn check(&self, texts: &[Vec<Option<String>>], row: usize) -> Result<()> {
        let Some((format, values)) = texts.split_first() else {
            return Ok(());
        };
        let Some(f) = at(format, row).as_deref() else {
            return Ok(());
        };
        let Some((specifiers, widths, stars)) = format_widths(f) else {
            // There the wrapped function takes the next argument in
            // sequence, PostgreSQL the one after the positioned one:
            // refused rather than answered differently.
            return exec_err!(
                "{}(): a specifier without a position after one with a position (%2$s, then %s) is not supported; give each a position",
                self.inner.name()
            );
        };
        let row_values = || values.iter().filter_map(|t| at(t, row).as_deref());
        let longest = row_values().map(|v| v.len() as i64).max().unwrap_or(0);
        let star = match stars {
            0 => 0,
            _ => row_values()
                .filter_map(|v| v.parse::<i64>().ok())
                .map(i64::saturating_abs)
                .max()
                .unwrap_or(0),
        };
        let bytes = (f.len() as i64)
            .saturating_add(widths)
            .saturating_add(stars.saturating_mul(star))
            .saturating_add(specifiers.saturating_mul(longest));
        if bytes > MAX_VALUE_BYTES {
            return exec_err!(
                "{}(): a result of {bytes} bytes is larger than the {MAX_VALUE_BYTES}-byte limit on one value",
                self.inner.name()
            );
        }
        Ok(())
    }

    /// The inner function on one row's texts.
    fn row(
        &self,
        args: &ScalarFunctionArgs,
        texts: &[Vec<Option<String>>],
        row: usize,
    ) -> Result<Option<String>> {
        let values: Vec<ColumnarValue> = texts
            .iter()
            .map(|t| ColumnarValue::Scalar(ScalarValue::Utf8(at(t, row).clone())))
            .collect();
        let fields = values
            .iter()
            .map(|_| Arc::new(Field::new("a", DataType::Utf8, true)))
            .collect();
        let out = self.inner.invoke_with_args(ScalarFunctionArgs {
            args: values,
            arg_fields: fields,
            number_rows: 1,
            return_field: args.return_field.clone(),
            config_options: args.config_options.clone(),
        })?;
        Ok(match out {
            ColumnarValue::Scalar(ScalarValue::Utf8(s)) => s,
            ColumnarValue::Scalar(other) => (!other.is_null()).then(|| other.to_string()),
            ColumnarValue::Array(a) => as_text(&a)?.into_iter().next().flatten(),
        })
    }
}

impl ScalarUDFImpl for PgTextFormat {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let constant = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if constant { 1 } else { args.number_rows };
        // A scalar stays one text, not one a row (a long one copied a
        // batch's rows times took gigabytes).
        let texts = args
            .args
            .iter()
            .map(|a| match a {
                ColumnarValue::Scalar(s) => as_text(&s.to_array()?),
                ColumnarValue::Array(a) => as_text(a),
            })
            .collect::<Result<Vec<_>>>()?;
        if constant {
            self.check(&texts, 0)?;
            return Ok(ColumnarValue::Scalar(ScalarValue::Utf8(
                self.row(&args, &texts, 0)?,
            )));
        }
        let mut out = StringBuilder::with_capacity(rows, rows * 16);
        for row in 0..rows {
            self.check(&texts, row)?;
            out.append_option(self.row(&args, &texts, row)?);
            if out.values_slice().len() as i64 > MAX_CALL_BYTES {
                return exec_err!(
                    "{}(): the results of {rows} rows would take more than the {MAX_CALL_BYTES}-byte limit on one call's results (rows are computed a batch at a time)",
                    self.inner.name()
                );
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}
