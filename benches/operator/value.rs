//! A figure's value in the report, printed as the earlier Python script printed it.

pub const MIB: f64 = 1024.0 * 1024.0;

/// A figure's value, printed as the earlier script printed it: a float with 3 decimals, a
/// count as an integer, a breakdown as `{'kind': n, ...}`.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Float(f64),
    Text(String),
    /// Counts by kind; floats are API server counters, integers log lines.
    Map(Vec<(String, Value)>),
    List(Vec<i64>),
}

impl Value {
    /// The value as a number, for a goal's check; `None` for text, maps and lists.
    pub fn number(&self) -> Option<f64> {
        match self {
            Value::Int(i) => Some(*i as f64),
            Value::Float(f) => Some(*f),
            _ => None,
        }
    }

    fn inner(&self) -> String {
        match self {
            // As Python's repr: 2.0, 151.0, 0.5.
            Value::Float(v) => format!("{v:?}"),
            Value::Text(s) => format!("'{s}'"),
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Int(v) => write!(f, "{v}"),
            Value::Float(v) => write!(f, "{v:.3}"),
            Value::Text(s) => f.write_str(s),
            Value::Map(entries) => {
                let items: Vec<String> = entries
                    .iter()
                    .map(|(k, v)| format!("'{k}': {}", v.inner()))
                    .collect();
                write!(f, "{{{}}}", items.join(", "))
            }
            Value::List(items) => {
                let items: Vec<String> = items.iter().map(i64::to_string).collect();
                write!(f, "[{}]", items.join(", "))
            }
        }
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Text(v)
    }
}

pub fn map<V: Clone + Into<Value>>(entries: &[(String, V)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_as_the_earlier_script_printed_them() {
        assert_eq!(Value::Float(0.6969).to_string(), "0.697");
        assert_eq!(Value::Float(0.0).to_string(), "0.000");
        assert_eq!(Value::Int(5000).to_string(), "5000");
        let own = map(&[("events//POST".to_string(), 20i64)]);
        assert_eq!(own.to_string(), "{'events//POST': 20}");
        let all = map(&[
            ("pods//LIST".to_string(), 2.0f64),
            ("pods//GET".to_string(), 151.0),
            ("x".to_string(), 0.5),
        ]);
        assert_eq!(
            all.to_string(),
            "{'pods//LIST': 2.0, 'pods//GET': 151.0, 'x': 0.5}"
        );
        assert_eq!(Value::List(vec![3, 1]).to_string(), "[3, 1]");
        assert_eq!(Value::List(vec![]).to_string(), "[]");
    }
}
