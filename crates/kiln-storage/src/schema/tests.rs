use super::*;
use crate::error::ErrorKind;

fn columns(n: usize) -> Vec<ColumnDef> {
    let mut cols = vec![ColumnDef {
        name: "ts".into(),
        ty: ColumnType::Timestamp,
        nullable: false,
    }];
    cols.extend((1..n).map(|i| ColumnDef {
        name: format!("c{i}"),
        ty: ColumnType::Bigint,
        nullable: true,
    }));
    cols
}

#[test]
fn a_table_of_more_than_1600_columns_is_refused_naming_its_count() {
    let def = TableDef::new(1, "wide", columns(MAX_COLUMNS), None, &[]).unwrap();
    assert_eq!(def.columns.len(), 1600);
    let e = TableDef::new(1, "wide", columns(MAX_COLUMNS + 1), None, &[]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidSchema);
    assert_eq!(
        e.to_string(),
        "invalid table definition: tables can have at most 1600 columns: table 'wide' has 1601"
    );
}
