//! PostgreSQL's `session_user` and `current_user` (which the PostgreSQL
//! protocols' parser makes `session_user`, as a bare `user`): who the session is, read from the query's options
//! ([`crate::options::session_user`]), which the engine sets per query.
//! Stable, like PostgreSQL's: folded to a constant when the query is
//! planned, so a plan kept across executions never holds it.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl, Signature, Volatility,
};

#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SessionUser {
    signature: Signature,
    /// `current_user`, as DataFusion's parser leaves it (HTTP).
    aliases: [String; 1],
}

impl Default for SessionUser {
    fn default() -> Self {
        Self {
            signature: Signature::nullary(Volatility::Stable),
            aliases: ["current_user".into()],
        }
    }
}

impl ScalarUDFImpl for SessionUser {
    fn name(&self) -> &str {
        "session_user"
    }
    fn aliases(&self) -> &[String] {
        &self.aliases
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let user = crate::options::session_user(&args.config_options).unwrap_or(crate::auth::ADMIN);
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(user.into()))))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::Field;
    use datafusion::config::ConfigOptions;

    use super::*;
    use crate::options::KilnOptions;

    fn call(options: ConfigOptions) -> ScalarValue {
        let udf = SessionUser::default();
        let args = ScalarFunctionArgs {
            args: vec![],
            arg_fields: vec![],
            number_rows: 1,
            return_field: Arc::new(Field::new("u", DataType::Utf8, true)),
            config_options: Arc::new(options),
        };
        match udf.invoke_with_args(args).unwrap() {
            ColumnarValue::Scalar(s) => s,
            ColumnarValue::Array(_) => panic!("one value"),
        }
    }

    #[test]
    fn the_session_user_comes_from_the_options() {
        let mut options = ConfigOptions::new();
        options.extensions.insert(KilnOptions {
            cubes: true,
            session_user: Some("alice".into()),
        });
        assert_eq!(call(options), ScalarValue::Utf8(Some("alice".into())));
        // Without one (authentication off, no name given): the admin.
        assert_eq!(
            call(ConfigOptions::new()),
            ScalarValue::Utf8(Some(crate::auth::ADMIN.into()))
        );
    }
}
