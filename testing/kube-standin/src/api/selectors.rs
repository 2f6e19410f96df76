//! Label and field selectors, parsed with the grammar and checks of apimachinery's `labels`
//! and `fields` packages, and matched against objects.

use serde_json::{Map, Value};

/// One label requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=v`, `key==v`, `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=v`, `key notin (a,b)`.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
    /// `key>n`.
    Gt(String, i64),
    /// `key<n`.
    Lt(String, i64),
}

/// A label selector: every requirement must hold. The empty selector matches everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector(pub Vec<Requirement>);

/// Why a selector does not parse or is not supported (the server answers 400 with it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);

fn err(message: impl Into<String>) -> SelectorError {
    SelectorError(message.into())
}

/// Whether `key` is a valid label key: `[prefix/]name`, the prefix a DNS subdomain, the name
/// up to 63 characters of alphanumerics, `-`, `_` and `.`, starting and ending alphanumeric.
pub fn valid_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err("prefix part must be non-empty".to_string());
        }
        if !super::meta::is_dns_subdomain(prefix) {
            return Err(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                    .to_string(),
            );
        }
    }
    if name.is_empty() {
        return Err("name part must be non-empty".to_string());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".to_string());
    }
    if !qualified_name_chars(name) {
        return Err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
                .to_string(),
        );
    }
    Ok(())
}

fn qualified_name_chars(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Whether `value` is a valid label value (empty, or a qualified name of up to 63 characters).
pub fn valid_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err("must be no more than 63 characters".to_string());
    }
    if !qualified_name_chars(value) {
        return Err(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                .to_string(),
        );
    }
    Ok(())
}

/// The lexer of label selectors.
struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    text: &'a str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Comma,
    Open,
    Close,
    Not,
    NotEquals,
    Equals,
    DoubleEquals,
    Gt,
    Lt,
    In,
    NotIn,
}

impl Lexer<'_> {
    fn tokens(text: &str) -> Result<Vec<Token>, SelectorError> {
        let mut lexer = Lexer {
            chars: text.char_indices().peekable(),
            text,
        };
        let mut out = Vec::new();
        while let Some(&(i, c)) = lexer.chars.peek() {
            match c {
                ' ' | '\t' | '\n' | '\r' => {
                    lexer.chars.next();
                }
                ',' => {
                    lexer.chars.next();
                    out.push(Token::Comma);
                }
                '(' => {
                    lexer.chars.next();
                    out.push(Token::Open);
                }
                ')' => {
                    lexer.chars.next();
                    out.push(Token::Close);
                }
                '!' | '=' | '>' | '<' => {
                    lexer.chars.next();
                    let next = lexer.chars.peek().map(|&(_, c)| c);
                    let token = match (c, next) {
                        ('!', Some('=')) => {
                            lexer.chars.next();
                            Token::NotEquals
                        }
                        ('=', Some('=')) => {
                            lexer.chars.next();
                            Token::DoubleEquals
                        }
                        ('!', _) => Token::Not,
                        ('=', _) => Token::Equals,
                        ('>', _) => Token::Gt,
                        _ => Token::Lt,
                    };
                    out.push(token);
                }
                _ => {
                    let start = i;
                    let mut end = text.len();
                    while let Some(&(j, c)) = lexer.chars.peek() {
                        if matches!(
                            c,
                            ' ' | '\t' | '\n' | '\r' | ',' | '(' | ')' | '!' | '=' | '>' | '<'
                        ) {
                            end = j;
                            break;
                        }
                        lexer.chars.next();
                    }
                    let word = &lexer.text[start..end];
                    out.push(match word {
                        "in" => Token::In,
                        "notin" => Token::NotIn,
                        _ => Token::Identifier(word.to_string()),
                    });
                }
            }
        }
        Ok(out)
    }
}

impl LabelSelector {
    /// Parses the string form (`a=b,c!=d,e in (f,g),!h`).
    ///
    /// # Errors
    /// Syntax errors, invalid keys or values, as the real parser reports them.
    pub fn parse(text: &str) -> Result<LabelSelector, SelectorError> {
        let tokens = Lexer::tokens(text)?;
        let mut requirements = Vec::new();
        let mut i = 0;
        let at = |i: usize| tokens.get(i).cloned();
        while i < tokens.len() {
            let requirement = match at(i) {
                Some(Token::Not) => {
                    let Some(Token::Identifier(key)) = at(i + 1) else {
                        return Err(err(format!(
                            "unable to parse requirement: found '{}', expected: identifier after '!'",
                            describe(at(i + 1))
                        )));
                    };
                    i += 2;
                    Requirement::DoesNotExist(key)
                }
                Some(Token::Identifier(key)) => {
                    i += 1;
                    match at(i) {
                        None | Some(Token::Comma) => Requirement::Exists(key),
                        Some(Token::Equals | Token::DoubleEquals) => {
                            let value = single_value(&tokens, &mut i)?;
                            Requirement::In(key, vec![value])
                        }
                        Some(Token::NotEquals) => {
                            let value = single_value(&tokens, &mut i)?;
                            Requirement::NotIn(key, vec![value])
                        }
                        Some(Token::Gt | Token::Lt) => {
                            let gt = at(i) == Some(Token::Gt);
                            let value = single_value(&tokens, &mut i)?;
                            let n: i64 = value.parse().map_err(|_| {
                                err(format!(
                                    "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: {value:?}"
                                ))
                            })?;
                            if gt {
                                Requirement::Gt(key, n)
                            } else {
                                Requirement::Lt(key, n)
                            }
                        }
                        Some(Token::In | Token::NotIn) => {
                            let not = at(i) == Some(Token::NotIn);
                            i += 1;
                            let values = set_values(&tokens, &mut i)?;
                            if not {
                                Requirement::NotIn(key, values)
                            } else {
                                Requirement::In(key, values)
                            }
                        }
                        other => {
                            return Err(err(format!(
                                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                                describe(other)
                            )));
                        }
                    }
                }
                other => {
                    return Err(err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        describe(other)
                    )));
                }
            };
            let key = match &requirement {
                Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::DoesNotExist(k)
                | Requirement::Gt(k, _)
                | Requirement::Lt(k, _) => k,
            };
            valid_label_key(key).map_err(|why| {
                err(format!(
                    "unable to parse requirement: key: Invalid value: {key:?}: {why}"
                ))
            })?;
            if let Requirement::In(_, values) | Requirement::NotIn(_, values) = &requirement {
                for (n, value) in values.iter().enumerate() {
                    valid_label_value(value).map_err(|why| {
                        err(format!(
                            "unable to parse requirement: values[{n}][{key}]: Invalid value: {value:?}: {why}"
                        ))
                    })?;
                }
            }
            requirements.push(requirement);
            match at(i) {
                None => break,
                Some(Token::Comma) => {
                    i += 1;
                    if i == tokens.len() {
                        return Err(err("found 'end of string', expected: identifier or '!'"));
                    }
                }
                other => {
                    return Err(err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        describe(other)
                    )));
                }
            }
        }
        Ok(LabelSelector(requirements))
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels`, `matchExpressions`).
    ///
    /// # Errors
    /// An unknown operator or a malformed expression.
    pub fn from_object(selector: &Value) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        if let Some(labels) = selector["matchLabels"].as_object() {
            for (k, v) in labels {
                requirements.push(Requirement::In(
                    k.clone(),
                    vec![v.as_str().unwrap_or_default().to_string()],
                ));
            }
        }
        for expression in selector["matchExpressions"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let key = expression["key"].as_str().unwrap_or_default().to_string();
            let values: Vec<String> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            requirements.push(match expression["operator"].as_str() {
                Some("In") => Requirement::In(key, values),
                Some("NotIn") => Requirement::NotIn(key, values),
                Some("Exists") => Requirement::Exists(key),
                Some("DoesNotExist") => Requirement::DoesNotExist(key),
                other => {
                    return Err(err(format!(
                        "{:?} is not a valid label selector operator",
                        other.unwrap_or_default()
                    )));
                }
            });
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether `labels` (an object's `metadata.labels`, possibly absent) match.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Requirement::In(k, values) => get(k).is_some_and(|v| values.iter().any(|x| x == v)),
            Requirement::NotIn(k, values) => get(k).is_none_or(|v| !values.iter().any(|x| x == v)),
            Requirement::Exists(k) => get(k).is_some(),
            Requirement::DoesNotExist(k) => get(k).is_none(),
            Requirement::Gt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::Lt(k, n) => get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        })
    }

    /// Whether it is the empty selector.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn describe(token: Option<Token>) -> String {
    match token {
        None => "end of string".to_string(),
        Some(Token::Identifier(s)) => s,
        Some(Token::Comma) => ",".to_string(),
        Some(Token::Open) => "(".to_string(),
        Some(Token::Close) => ")".to_string(),
        Some(Token::Not) => "!".to_string(),
        Some(Token::NotEquals) => "!=".to_string(),
        Some(Token::Equals) => "=".to_string(),
        Some(Token::DoubleEquals) => "==".to_string(),
        Some(Token::Gt) => ">".to_string(),
        Some(Token::Lt) => "<".to_string(),
        Some(Token::In) => "in".to_string(),
        Some(Token::NotIn) => "notin".to_string(),
    }
}

/// The value after an operator at `tokens[*i]`; an absent value is the empty string.
fn single_value(tokens: &[Token], i: &mut usize) -> Result<String, SelectorError> {
    *i += 1;
    match tokens.get(*i) {
        Some(Token::Identifier(v)) => {
            *i += 1;
            Ok(v.clone())
        }
        Some(Token::In) => {
            *i += 1;
            Ok("in".to_string())
        }
        Some(Token::NotIn) => {
            *i += 1;
            Ok("notin".to_string())
        }
        None | Some(Token::Comma) => Ok(String::new()),
        Some(other) => Err(err(format!(
            "found '{}', expected: identifier",
            describe(Some(other.clone()))
        ))),
    }
}

/// `(a, b, c)` at `tokens[*i]`.
fn set_values(tokens: &[Token], i: &mut usize) -> Result<Vec<String>, SelectorError> {
    if tokens.get(*i) != Some(&Token::Open) {
        return Err(err(format!(
            "found '{}', expected: '('",
            describe(tokens.get(*i).cloned())
        )));
    }
    *i += 1;
    let mut values = Vec::new();
    let mut expect_value = true;
    loop {
        match tokens.get(*i) {
            Some(Token::Close) => {
                if expect_value && !values.is_empty() {
                    values.push(String::new());
                }
                *i += 1;
                return Ok(values);
            }
            Some(Token::Identifier(v)) if expect_value => {
                values.push(v.clone());
                expect_value = false;
            }
            Some(Token::Comma) => {
                if expect_value {
                    values.push(String::new());
                }
                expect_value = true;
            }
            other => {
                return Err(err(format!(
                    "found '{}', expected: ',', ')' or identifier",
                    describe(other.cloned())
                )));
            }
        }
        *i += 1;
    }
}

/// One field requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub value: String,
    pub equal: bool,
}

/// A field selector: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector(pub Vec<FieldRequirement>);

impl FieldSelector {
    /// Parses `a=b,c!=d` (`\,` `\=` `\\` escape).
    ///
    /// # Errors
    /// A term without an operator.
    pub fn parse(text: &str) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        for term in split_unescaped(text, ',') {
            if term.is_empty() {
                continue;
            }
            let (field, value, equal) = if let Some(at) = find_unescaped(&term, "!=") {
                (&term[..at], &term[at + 2..], false)
            } else if let Some(at) = find_unescaped(&term, "==") {
                (&term[..at], &term[at + 2..], true)
            } else if let Some(at) = find_unescaped(&term, "=") {
                (&term[..at], &term[at + 1..], true)
            } else {
                return Err(err(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            requirements.push(FieldRequirement {
                field: field.to_string(),
                value: unescape(value),
                equal,
            });
        }
        Ok(FieldSelector(requirements))
    }

    /// Whether `fields` (the object's selectable fields) satisfy every requirement.
    pub fn matches(&self, fields: &[(String, String)]) -> bool {
        self.0.iter().all(|r| {
            let found = fields
                .iter()
                .find(|(k, _)| *k == r.field)
                .map(|(_, v)| v.as_str());
            match found {
                Some(v) => (v == r.value) == r.equal,
                // Not a field of this object: never equal.
                None => !r.equal,
            }
        })
    }

    /// The fields it names.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|r| r.field.as_str())
    }

    /// The value `field` must equal, if the selector says exactly that (`metadata.name=x`).
    pub fn exact(&self, field: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|r| r.equal && r.field == field)
            .map(|r| r.value.as_str())
    }

    /// Whether it is the empty selector.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn split_unescaped(text: &str, separator: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            current.push('\\');
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == separator {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    if escaped {
        current.push('\\');
    }
    parts.push(current);
    parts
}

fn find_unescaped(text: &str, needle: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if text[i..].starts_with(needle) {
            return Some(i);
        }
        i += 1;
    }
    None
}

fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut escaped = false;
    for c in text.chars() {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            out.push(c);
        }
    }
    out
}

/// The value at a dotted path of an object, as a field selector compares it (strings as
/// they are, numbers and booleans formatted, absent as `None`).
pub fn field_value(object: &Value, path: &str) -> Option<String> {
    let mut current = object;
    for part in path.split('.') {
        current = current.get(part)?;
    }
    match current {
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        Value::Null => None,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn label_selectors_parse_and_match() {
        let s =
            LabelSelector::parse("app=web, tier!=db,env in (prod, staging),!legacy,team").unwrap();
        assert_eq!(s.0.len(), 5);
        let l = labels(json!({"app": "web", "tier": "fe", "env": "prod", "team": "a"}));
        assert!(s.matches(Some(&l)));
        let l = labels(json!({"app": "web", "tier": "fe", "env": "dev", "team": "a"}));
        assert!(!s.matches(Some(&l)));
        let l = labels(json!({"app": "web", "env": "prod", "team": "a", "legacy": "x"}));
        assert!(!s.matches(Some(&l)));
        assert!(LabelSelector::parse("").unwrap().matches(None));
        assert!(LabelSelector::parse("a notin (x)").unwrap().matches(None));
        assert!(!LabelSelector::parse("a").unwrap().matches(None));
        let gt = LabelSelector::parse("n>3").unwrap();
        assert!(gt.matches(Some(&labels(json!({"n": "4"})))));
        assert!(!gt.matches(Some(&labels(json!({"n": "3"})))));
        assert_eq!(
            LabelSelector::parse("a==").unwrap().0,
            vec![Requirement::In("a".into(), vec![String::new()])]
        );
    }

    #[test]
    fn bad_label_selectors_are_refused() {
        for bad in [
            "a=b,", "a b", "a in x", "=b", "a=b c", "-a=b", "a=-b", "n>x",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad}");
        }
        let e = LabelSelector::parse("a=b=c").unwrap_err();
        assert!(e.0.contains("expected: ',' or 'end of string'"), "{e}");
    }

    #[test]
    fn selector_objects_become_requirements() {
        let s = LabelSelector::from_object(&json!({
            "matchLabels": {"a": "b"},
            "matchExpressions": [{"key": "c", "operator": "In", "values": ["d"]},
                                 {"key": "e", "operator": "DoesNotExist"}],
        }))
        .unwrap();
        assert!(s.matches(Some(&labels(json!({"a": "b", "c": "d"})))));
        assert!(!s.matches(Some(&labels(json!({"a": "b", "c": "d", "e": "f"})))));
        assert!(
            LabelSelector::from_object(
                &json!({"matchExpressions": [{"key": "a", "operator": "Is"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn field_selectors_parse_escape_and_match() {
        let s = FieldSelector::parse("metadata.name=x,type!=kubernetes.io/tls,a==b\\,c").unwrap();
        assert_eq!(s.exact("metadata.name"), Some("x"));
        assert_eq!(s.0[2].value, "b,c");
        let fields = vec![
            ("metadata.name".to_string(), "x".to_string()),
            ("type".to_string(), "Opaque".to_string()),
            ("a".to_string(), "b,c".to_string()),
        ];
        assert!(s.matches(&fields));
        assert!(
            !FieldSelector::parse("metadata.name=y")
                .unwrap()
                .matches(&fields)
        );
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert_eq!(
            field_value(&json!({"spec": {"n": 3, "b": true}}), "spec.n").as_deref(),
            Some("3")
        );
        assert_eq!(
            field_value(&json!({"spec": {"b": true}}), "spec.b").as_deref(),
            Some("true")
        );
    }
}
