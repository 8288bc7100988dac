//! `information_schema._pg_expandarray(array)`: PostgreSQL's helper that
//! pairs each element of an array with its position, rows `(x, n)`;
//! drivers read key and index columns with it (pgjdbc's `getPrimaryKeys`,
//! `getIndexInfo`, `getBestRowIdentifier`).
//!
//! PostgreSQL's is set-returning, called in a select list, which DataFusion
//! has no place for: here it returns the list of those rows, and the
//! statement's call is planned as `unnest` of it
//! ([`kiln_query::shape::postgres`]), so each element is a row, as in
//! PostgreSQL. (A scalar giving one row would have to fail on longer
//! arrays, and DataFusion may evaluate a struct's fields below a filter,
//! on rows the query excludes.)
//!
//! [`super::pg_catalog`] gives the catalog's `int2vector` and `int2[]`
//! columns as `smallint[]`; text (what datafusion-postgres's catalog keeps
//! them as) is read as such an array too.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int32Array, ListArray, NullBufferBuilder, StructArray,
    new_empty_array,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

/// `_pg_expandarray(array)`: the list of its `(x, n)` rows (module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct ExpandArray {
    signature: Signature,
    aliases: Vec<String>,
}

impl ExpandArray {
    pub(super) fn new() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
            aliases: vec!["information_schema._pg_expandarray".into()],
        }
    }
}

/// The row's fields: the element and its position.
fn fields(element: DataType) -> Fields {
    Fields::from(vec![
        Field::new("x", element, true),
        Field::new("n", DataType::Int32, true),
    ])
}

/// The element type of `arg`: text is `int2vector`'s or `int2[]`'s.
fn element(arg: &DataType) -> Result<DataType> {
    match arg {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
            Ok(DataType::Int16)
        }
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Ok(f.data_type().clone())
        }
        other => exec_err!("_pg_expandarray expects an array, not {other}"),
    }
}

impl ScalarUDFImpl for ExpandArray {
    fn name(&self) -> &str {
        "_pg_expandarray"
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let row = DataType::Struct(fields(element(&args[0])?));
        Ok(DataType::List(Arc::new(Field::new_list_field(row, true))))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let input = args.args[0].to_array(args.number_rows)?;
        let element_type = element(input.data_type())?;
        // Each row's elements, in order.
        let mut xs: Vec<ScalarValue> = Vec::new();
        let mut lengths = Vec::with_capacity(input.len());
        let mut nulls = NullBufferBuilder::new(input.len());
        if let DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(..) =
            input.data_type()
        {
            for i in 0..input.len() {
                let elements = match input.is_null(i) {
                    true => None,
                    false => match ScalarValue::try_from_array(&input, i)? {
                        ScalarValue::List(l) => Some(l.value(0)),
                        ScalarValue::LargeList(l) => Some(l.value(0)),
                        ScalarValue::FixedSizeList(l) => Some(l.value(0)),
                        _ => None,
                    },
                };
                nulls.append(elements.is_some());
                let elements = elements.unwrap_or_else(|| new_empty_array(&element_type));
                lengths.push(elements.len());
                for j in 0..elements.len() {
                    xs.push(ScalarValue::try_from_array(&elements, j)?);
                }
            }
        } else {
            let text = arrow::compute::cast(&input, &DataType::Utf8)?;
            for s in text.as_string::<i32>().iter() {
                nulls.append(s.is_some());
                let elements = s
                    .map(super::pg_catalog::int2s)
                    .transpose()?
                    .unwrap_or_default();
                lengths.push(elements.len());
                xs.extend(elements.into_iter().map(|x| ScalarValue::Int16(Some(x))));
            }
        }
        let positions: Int32Array = lengths
            .iter()
            .flat_map(|&len| 1..=len as i32)
            .map(Some)
            .collect();
        let values = match xs.is_empty() {
            true => new_empty_array(&element_type),
            false => ScalarValue::iter_to_array(xs)?,
        };
        let rows = StructArray::try_new(
            fields(element_type),
            vec![values, Arc::new(positions) as ArrayRef],
            None,
        )?;
        let list = ListArray::try_new(
            Arc::new(Field::new_list_field(rows.data_type().clone(), true)),
            OffsetBuffer::from_lengths(lengths),
            Arc::new(rows),
            nulls.finish(),
        )?;
        Ok(ColumnarValue::Array(Arc::new(list)))
    }
}
