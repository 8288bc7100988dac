//! PostgreSQL's names of types, as `information_schema.columns` reports
//! them: `data_type` (`bigint`, `timestamp without time zone`) through
//! [`pg_type_name`] (used by `rules::pg_types`), and `udt_name` (`int8`,
//! `timestamp`) through [`PgUdtName`], which `shape::relations` calls for
//! a statement that reads that column.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

use crate::shape::relations::UDT_NAME;

/// PostgreSQL's name for the Arrow type `arrow` names (as DataFusion's
/// information_schema writes it); an unknown one is kept.
pub fn pg_type_name(arrow: &str) -> String {
    let base = arrow.split('(').next().unwrap_or(arrow);
    let name = match base {
        "Int8" | "Int16" | "UInt8" => "smallint",
        "Int32" | "UInt16" => "integer",
        "Int64" | "UInt32" => "bigint",
        "UInt64" | "Decimal32" | "Decimal64" | "Decimal128" | "Decimal256" => "numeric",
        "Float16" | "Float32" => "real",
        "Float64" => "double precision",
        "Utf8" | "LargeUtf8" | "Utf8View" => "character varying",
        "Boolean" => "boolean",
        "Date32" | "Date64" => "date",
        "Timestamp" if arrow.contains(',') => "timestamp with time zone",
        "Timestamp" => "timestamp without time zone",
        "Time32" | "Time64" => "time without time zone",
        "Interval" | "Duration" => "interval",
        "Binary" | "LargeBinary" | "BinaryView" | "FixedSizeBinary" => "bytea",
        "List" | "LargeList" | "ListView" | "FixedSizeList" => "ARRAY",
        "Struct" | "Map" => "json",
        "Null" => "text",
        _ => return arrow.to_string(),
    };
    name.to_string()
}

/// PostgreSQL's `udt_name` (the type's internal name: `int8`,
/// `timestamp`, `varchar`) for a type named by DataFusion (`Int64`) or
/// by [`pg_type_name`] (`bigint`); an unknown one is kept.
pub fn pg_udt_name(name: &str) -> String {
    let pg = pg_type_name(name);
    let udt = match pg.as_str() {
        "smallint" => "int2",
        "integer" => "int4",
        "bigint" => "int8",
        "real" => "float4",
        "double precision" => "float8",
        "character varying" => "varchar",
        "boolean" => "bool",
        "timestamp with time zone" => "timestamptz",
        "timestamp without time zone" => "timestamp",
        "time without time zone" => "time",
        "ARRAY" => "_text",
        other => other,
    };
    udt.to_string()
}

/// [`pg_udt_name`] as a function of a text column.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct PgUdtName {
    signature: Signature,
}

impl Default for PgUdtName {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for PgUdtName {
    fn name(&self) -> &str {
        UDT_NAME
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        crate::functions::map_text(&args.args[0], pg_udt_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrow_names_become_postgresql_names() {
        for (arrow, pg) in [
            ("Timestamp(ns)", "timestamp without time zone"),
            ("Timestamp(ns, \"UTC\")", "timestamp with time zone"),
            ("Utf8View", "character varying"),
            ("Float64", "double precision"),
            ("Int64", "bigint"),
            ("Int32", "integer"),
            ("Boolean", "boolean"),
            ("Date32", "date"),
            ("Decimal128(10, 2)", "numeric"),
            ("List(Int64)", "ARRAY"),
            ("Something", "Something"),
        ] {
            assert_eq!(pg_type_name(arrow), pg, "{arrow}");
        }
    }

    #[test]
    fn udt_names_from_either_spelling() {
        for (name, udt) in [
            ("Int64", "int8"),
            ("bigint", "int8"),
            ("Timestamp(ns)", "timestamp"),
            ("timestamp without time zone", "timestamp"),
            ("Utf8View", "varchar"),
            ("Float64", "float8"),
            ("Boolean", "bool"),
            ("date", "date"),
        ] {
            assert_eq!(pg_udt_name(name), udt, "{name}");
        }
    }
}
