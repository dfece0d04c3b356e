//! Validating a feature's typed config and writing every default explicitly (locks §5: the config
//! is part of the hash, so an implicit default would make two spellings of one config hash
//! differently).

use serde_json::{Map, Value};

use super::Parser;
use super::fields::{Fields, one_of};
use crate::builtins::features::FeatureId;
use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, child};

/// The canonical config of `feature`: `{}` for toggle-only features, else every field with its
/// given or default value. `pointer` is the feature entry.
pub(super) fn validate(
    p: &mut Parser<'_>,
    feature: FeatureId,
    config: Option<&Value>,
    pointer: &str,
) -> Option<Value> {
    let fields = feature.config_fields();
    let config_pointer = child(pointer, "config");
    if !feature.configurable() {
        if config.is_some() {
            p.error(
                CompileError::new(
                    Code::FeatureConfigNotAllowed,
                    config_pointer,
                    format!("`{}` is a toggle and takes no config.", feature.as_str()),
                    format!(
                        "Write the feature as the plain string \"{}\".",
                        feature.as_str()
                    ),
                )
                .with_fix(AutoFix::Replace {
                    path: pointer.to_owned(),
                    value: Value::from(feature.as_str()),
                }),
            );
            return None;
        }
        return Some(Value::Object(Map::new()));
    }
    let mut out = Map::new();
    let mut ok = true;
    if let Some(config) = config {
        let allowed = feature.config_field_names();
        let f = Fields::new(p, config, &config_pointer, "a feature config", allowed)?;
        for field in fields {
            if let Some(v) = f.opt(field.name) {
                match one_of(p, v, &f.at(field.name), field.name, field.allowed) {
                    Some(value) => {
                        out.insert(field.name.to_owned(), Value::from(value));
                    }
                    None => ok = false,
                }
            }
        }
        let before = p.errors.len();
        f.finish(p);
        ok &= p.errors.len() == before;
    }
    for field in fields {
        out.entry(field.name.to_owned())
            .or_insert_with(|| Value::from(field.default));
    }
    ok.then_some(Value::Object(out))
}
