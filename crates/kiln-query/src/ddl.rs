//! DDL Kiln handles itself rather than DataFusion: `CREATE TABLE` becomes a
//! persisted Kiln table (with its time column and sort key from
//! `WITH (time_column = '...', sort_key = 'a,b')`), `DROP TABLE` drops one.

use datafusion::sql::sqlparser::ast::{
    self, ColumnOption, CreateTableOptions, KillType, ObjectName, ObjectType, SqlOption, Statement,
};
use kiln_storage::{ColumnDef, ColumnType, CreateTable};

use crate::error::{Error, Result};

/// What a DDL statement asks for.
pub enum Ddl {
    Create(CreateTable),
    Drop {
        names: Vec<String>,
        if_exists: bool,
    },
    /// `KILL [QUERY] id`: stop a running query (its id in `system.queries`).
    Kill {
        id: u64,
    },
}

/// Recognizes the statements Kiln handles itself.
pub fn parse(stmt: &Statement) -> Result<Option<Ddl>> {
    match stmt {
        Statement::CreateTable(ct) if ct.query.is_some() => Err(Error::Unsupported(
            "CREATE TABLE ... AS SELECT: create the table, then INSERT INTO it ... SELECT".into(),
        )),
        Statement::CreateTable(ct) if !ct.external => Ok(Some(Ddl::Create(create_table(ct)?))),
        Statement::Drop {
            object_type: ObjectType::Table,
            if_exists,
            names,
            ..
        } => Ok(Some(Ddl::Drop {
            names: names.iter().map(object_name).collect::<Result<_>>()?,
            if_exists: *if_exists,
        })),
        Statement::Kill { modifier, id } => match modifier {
            None | Some(KillType::Query) => Ok(Some(Ddl::Kill { id: *id })),
            Some(other) => Err(Error::Unsupported(format!(
                "KILL {other}: only KILL QUERY id is supported"
            ))),
        },
        _ => Ok(None),
    }
}

fn object_name(name: &ObjectName) -> Result<String> {
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident().map(ident))
        .collect();
    match parts.as_slice() {
        [t] => Ok(t.clone()),
        [s, t] if s == crate::session::SCHEMA => Ok(t.clone()),
        [c, s, t] if c == crate::session::CATALOG && s == crate::session::SCHEMA => Ok(t.clone()),
        _ => Err(Error::Sql(format!(
            "tables live in {}.{}; '{name}' is not a table name there",
            crate::session::CATALOG,
            crate::session::SCHEMA
        ))),
    }
}

/// Unquoted identifiers are case-insensitive (lower-cased), as in PostgreSQL.
fn ident(i: &ast::Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

fn create_table(ct: &ast::CreateTable) -> Result<CreateTable> {
    if ct.or_replace || ct.temporary {
        return Err(Error::Sql(
            "CREATE OR REPLACE / TEMPORARY tables are not supported".into(),
        ));
    }
    let mut columns = vec![];
    for c in &ct.columns {
        let type_name = c.data_type.to_string();
        let ty = ColumnType::from_sql(&type_name).ok_or_else(|| {
            Error::Sql(format!(
                "column '{}': type {type_name} is not supported (use BOOLEAN, INT, BIGINT, DOUBLE, VARCHAR, TEXT, DATE or TIMESTAMP)",
                c.name.value
            ))
        })?;
        let mut nullable = true;
        for o in &c.options {
            match &o.option {
                ColumnOption::NotNull => nullable = false,
                ColumnOption::Null => nullable = true,
                other => {
                    return Err(Error::Sql(format!(
                        "column '{}': option '{other}' is not supported",
                        c.name.value
                    )));
                }
            }
        }
        columns.push(ColumnDef {
            name: ident(&c.name),
            ty,
            nullable,
        });
    }
    if !ct.constraints.is_empty() {
        return Err(Error::Sql("table constraints are not supported".into()));
    }
    let mut time_column = None;
    let mut sort_key = vec![];
    let options = match &ct.table_options {
        CreateTableOptions::None => &[][..],
        CreateTableOptions::With(o) | CreateTableOptions::Options(o) => o.as_slice(),
        _ => {
            return Err(Error::Sql(
                "use WITH (time_column = '...', sort_key = '...') for table options".into(),
            ));
        }
    };
    for o in options {
        let SqlOption::KeyValue { key, value } = o else {
            return Err(Error::Sql(format!("unsupported table option '{o}'")));
        };
        let v = value.to_string().trim_matches('\'').to_string();
        match key.value.to_ascii_lowercase().as_str() {
            "time_column" => time_column = Some(v.to_ascii_lowercase()),
            "sort_key" => {
                sort_key = v
                    .split(',')
                    .map(|s| s.trim().to_ascii_lowercase())
                    .filter(|s| !s.is_empty())
                    .collect()
            }
            other => {
                return Err(Error::Sql(format!(
                    "unknown table option '{other}' (known: time_column, sort_key)"
                )));
            }
        }
    }
    Ok(CreateTable {
        name: object_name(&ct.name)?,
        columns,
        time_column,
        sort_key,
        if_not_exists: ct.if_not_exists,
    })
}

/// Checks `INSERT ... VALUES` for NULLs in NOT NULL columns before
/// DataFusion plans it, so the error names the row and the table column
/// (DataFusion would only name its internal `columnN`). Other NULLs, from
/// expressions or `INSERT ... SELECT`, are caught by the storage layer.
pub fn check_insert_values(stmt: &Statement, db: &kiln_storage::Db) -> Result<()> {
    let Statement::Insert(ins) = stmt else {
        return Ok(());
    };
    let ast::TableObject::TableName(name) = &ins.table else {
        return Ok(());
    };
    let Some(table) = object_name(name).ok().and_then(|n| db.table(&n)) else {
        return Ok(());
    };
    let Some(ast::SetExpr::Values(values)) = ins.source.as_ref().map(|q| q.body.as_ref()) else {
        return Ok(());
    };
    let cols = &table.def.columns;
    let targets: Vec<Option<usize>> = if ins.columns.is_empty() {
        (0..cols.len()).map(Some).collect()
    } else {
        ins.columns
            .iter()
            .map(|c| {
                let n =
                    c.0.last()
                        .and_then(|p| p.as_ident())
                        .map(ident)
                        .unwrap_or_default();
                cols.iter().position(|d| d.name == n)
            })
            .collect()
    };
    let time = table.def.time_column;
    let missing = |i: usize| -> String {
        if i == time {
            format!("missing time value in column '{}'", cols[i].name)
        } else {
            format!("NULL in NOT NULL column '{}'", cols[i].name)
        }
    };
    if !ins.columns.is_empty()
        && let Some(i) =
            (0..cols.len()).find(|i| !cols[*i].nullable && !targets.contains(&Some(*i)))
    {
        return Err(kiln_storage::Error::InvalidData(format!(
            "{}: the column is not in the INSERT's column list",
            missing(i)
        ))
        .into());
    }
    for (r, row) in values.rows.iter().enumerate() {
        for (expr, target) in row.content.iter().zip(&targets) {
            let is_null = matches!(expr, ast::Expr::Value(v) if v.value == ast::Value::Null);
            if let (true, Some(i)) = (is_null, target)
                && !cols[*i].nullable
            {
                return Err(kiln_storage::Error::NotNull {
                    row: r + 1,
                    column: cols[*i].name.clone(),
                    time: *i == time,
                }
                .into());
            }
        }
    }
    Ok(())
}
