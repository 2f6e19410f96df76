//! Command-line parsing with the semantics of spf13/pflag, which the Kubernetes binaries use:
//!
//! - `--name=value` and `--name value`; a boolean takes a value only after `=`
//!   (`--flag`, `--flag=false`), so `--flag false` leaves `false` as a positional argument;
//! - shorthands `-v 2`, `-v=2`, `-v2`, `-h`;
//! - `_` in a flag name is read as `-` (Kubernetes' word-separator normalization);
//! - a repeated scalar flag keeps its last value, a repeated list flag appends;
//! - `--` ends the flags; the Kubernetes binaries take no positional argument.
//!
//! Values are validated by kind as they are set, as pflag does, so a bad value fails the parse.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

mod tables;

pub use tables::table;

/// How a flag's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `--flag` means true; a value only after `=`.
    Bool,
    /// Any string; the last occurrence wins.
    Str,
    /// A path to a file the stand-in reads when the flag is given.
    File,
    /// A signed integer.
    Int,
    /// A floating point number.
    Float,
    /// A Go duration (`300ms`, `1h2m`).
    Duration,
    /// An IP address.
    Ip,
    /// Comma-separated items; repeated occurrences append.
    List,
    /// Like [`Kind::List`] but an item may contain commas: each occurrence is one item
    /// (pflag `stringArray`).
    Array,
    /// `key=value` pairs separated by commas; repeated occurrences merge.
    Map,
    /// `--version`, `--version=raw`, `--version=vX.Y.Z`.
    Version,
    /// `--help`.
    Help,
}

/// One flag of a role's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// The long name, without dashes.
    pub name: &'static str,
    /// How the value is read.
    pub kind: Kind,
    /// The one-letter shorthand, if any.
    pub shorthand: Option<char>,
}

/// Why a command line was refused. Messages follow pflag's and cobra's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// A long flag that the binary does not have.
    #[error("unknown flag: --{name}")]
    Unknown {
        /// The name as given.
        name: String,
    },
    /// A shorthand that the binary does not have.
    #[error("unknown shorthand flag: '{short}' in {arg}")]
    UnknownShorthand {
        /// The shorthand letter.
        short: char,
        /// The whole argument.
        arg: String,
    },
    /// A flag that needs a value came last.
    #[error("flag needs an argument: --{name}")]
    NeedsArgument {
        /// The flag's long name.
        name: String,
    },
    /// A shorthand that needs a value came last.
    #[error("flag needs an argument: '{short}' in {arg}")]
    NeedsArgumentShort {
        /// The shorthand letter.
        short: char,
        /// The whole argument.
        arg: String,
    },
    /// `---x`, `--=x` and the like.
    #[error("bad flag syntax: {arg}")]
    BadSyntax {
        /// The whole argument.
        arg: String,
    },
    /// A value that does not parse as the flag's kind.
    #[error("invalid argument {value:?} for \"--{name}\" flag: {reason}")]
    InvalidValue {
        /// The flag's long name.
        name: String,
        /// The value as given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Positional arguments, which the Kubernetes binaries refuse.
    #[error("{command:?} does not take any arguments, got {}", go_quoted_list(.args))]
    Positional {
        /// The command name.
        command: String,
        /// Every positional argument.
        args: Vec<String>,
    },
}

/// Formats a list like Go's `%q` of a `[]string`.
fn go_quoted_list(args: &[String]) -> String {
    let quoted: Vec<String> = args.iter().map(|a| format!("{a:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// What a parse asks the binary to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Run with these flags.
    Run(Flags),
    /// Print the help text and exit 0.
    Help,
    /// Print the version (`raw` or not) and exit 0.
    Version {
        /// `--version=raw` prints the version as JSON.
        raw: bool,
    },
}

/// The flags that were set, by long name. Lists and maps hold every item, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    values: BTreeMap<String, Vec<String>>,
}

impl Flags {
    /// Whether the flag was given.
    pub fn is_set(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// The last value of a scalar flag.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }

    /// Every item of a list, array or map flag (maps as `key=value`).
    pub fn items(&self, name: &str) -> &[String] {
        self.values.get(name).map(Vec::as_slice).unwrap_or(&[])
    }

    /// A boolean flag, or `default` when not given. The value was validated at parse time.
    pub fn bool_or(&self, name: &str, default: bool) -> bool {
        self.get(name).and_then(parse_go_bool).unwrap_or(default)
    }

    /// The long names of the flags given, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }
}

/// Parses `args` (without the program name) against `specs`, as `command` would.
///
/// # Errors
/// The first [`FlagError`] met, as pflag would report it.
pub fn parse(command: &str, specs: &[Spec], args: &[String]) -> Result<Parsed, FlagError> {
    let mut flags = Flags::default();
    let mut positional = Vec::new();
    let mut help = false;
    let mut version: Option<bool> = None;
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "--" {
            positional.extend(args[i..].iter().cloned());
            break;
        }
        let (spec, inline, shown) = if let Some(long) = arg.strip_prefix("--") {
            if long.is_empty() || long.starts_with('-') || long.starts_with('=') {
                return Err(FlagError::BadSyntax { arg: arg.clone() });
            }
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (long, None),
            };
            let name = name.replace('_', "-");
            let spec = specs
                .iter()
                .find(|s| s.name == name)
                .ok_or(FlagError::Unknown { name })?;
            (spec, inline, None)
        } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
            let mut chars = short.chars();
            let letter = chars.next().unwrap_or_default();
            let rest = chars.as_str();
            let spec = specs
                .iter()
                .find(|s| s.shorthand == Some(letter))
                .ok_or_else(|| FlagError::UnknownShorthand {
                    short: letter,
                    arg: arg.clone(),
                })?;
            let inline = if let Some(v) = rest.strip_prefix('=') {
                Some(v.to_string())
            } else if rest.is_empty() {
                None
            } else {
                Some(rest.to_string())
            };
            (spec, inline, Some(letter))
        } else {
            positional.push(arg.clone());
            continue;
        };
        let value = match (inline, spec.kind) {
            (Some(v), _) => v,
            (None, Kind::Bool | Kind::Help) => "true".to_string(),
            (None, Kind::Version) => "true".to_string(),
            (None, _) => match args.get(i) {
                Some(next) => {
                    i += 1;
                    next.clone()
                }
                None => {
                    return Err(match shown {
                        Some(short) => FlagError::NeedsArgumentShort {
                            short,
                            arg: arg.clone(),
                        },
                        None => FlagError::NeedsArgument {
                            name: spec.name.to_string(),
                        },
                    });
                }
            },
        };
        match spec.kind {
            Kind::Help => help = parse_bool_value(spec.name, &value)?,
            Kind::Version => {
                version = match value.as_str() {
                    "raw" => Some(true),
                    "false" | "f" | "F" | "FALSE" | "False" | "0" => None,
                    _ => Some(false),
                }
            }
            _ => set(&mut flags, spec, value)?,
        }
    }
    if help {
        return Ok(Parsed::Help);
    }
    if let Some(raw) = version {
        return Ok(Parsed::Version { raw });
    }
    let positional: Vec<String> = positional.into_iter().filter(|a| !a.is_empty()).collect();
    if !positional.is_empty() {
        return Err(FlagError::Positional {
            command: command.to_string(),
            args: positional,
        });
    }
    Ok(Parsed::Run(flags))
}

fn set(flags: &mut Flags, spec: &Spec, value: String) -> Result<(), FlagError> {
    let invalid = |reason: String| FlagError::InvalidValue {
        name: spec.name.to_string(),
        value: value.clone(),
        reason,
    };
    let entry = flags.values.entry(spec.name.to_string()).or_default();
    match spec.kind {
        Kind::Bool => {
            parse_bool_value(spec.name, &value)?;
            *entry = vec![value];
        }
        Kind::Str | Kind::File => *entry = vec![value],
        Kind::Int => {
            parse_go_int(&value).ok_or_else(|| invalid("invalid syntax".into()))?;
            *entry = vec![value];
        }
        Kind::Float => {
            value
                .parse::<f64>()
                .map_err(|e| invalid(format!("strconv.ParseFloat: {e}")))?;
            *entry = vec![value];
        }
        Kind::Duration => {
            parse_go_duration(&value)
                .ok_or_else(|| invalid(format!("time: invalid duration {value:?}")))?;
            *entry = vec![value];
        }
        Kind::Ip => {
            value
                .parse::<IpAddr>()
                .map_err(|_| invalid(format!("failed to parse IP: {value:?}")))?;
            *entry = vec![value];
        }
        Kind::List => entry.extend(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        ),
        Kind::Array => entry.push(value),
        Kind::Map => {
            for pair in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                if !pair.contains('=') {
                    return Err(invalid(format!("{pair:?} must be formatted as key=value")));
                }
                entry.push(pair.to_string());
            }
        }
        Kind::Help | Kind::Version => {}
    }
    Ok(())
}

fn parse_bool_value(name: &str, value: &str) -> Result<bool, FlagError> {
    parse_go_bool(value).ok_or_else(|| FlagError::InvalidValue {
        name: name.to_string(),
        value: value.to_string(),
        reason: format!("strconv.ParseBool: parsing {value:?}: invalid syntax"),
    })
}

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseInt(s, 0, 64)`: decimal, or `0x`/`0o`/`0b` prefixed.
pub fn parse_go_int(value: &str) -> Option<i64> {
    let (negative, digits) = match value.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, value.strip_prefix('+').unwrap_or(value)),
    };
    let lower = digits.to_ascii_lowercase();
    let magnitude = if let Some(hex) = lower.strip_prefix("0x") {
        i64::from_str_radix(hex, 16).ok()?
    } else if let Some(oct) = lower.strip_prefix("0o") {
        i64::from_str_radix(oct, 8).ok()?
    } else if let Some(bin) = lower.strip_prefix("0b") {
        i64::from_str_radix(bin, 2).ok()?
    } else if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    } else {
        digits.parse::<i64>().ok()?
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// Go's `time.ParseDuration` for non-negative durations (`1h2m3.5s`, `300ms`, `0`).
pub fn parse_go_duration(value: &str) -> Option<Duration> {
    if value == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = value.strip_prefix('+').unwrap_or(value);
    if rest.is_empty() {
        return None;
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return None;
        }
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds_per_unit;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// The help text of a role: what the stand-in is, then its flag names.
pub fn help_text(command: &str, specs: &[Spec]) -> String {
    let mut out = format!(
        "{command} (kube-standin)\n\n\
         THIS IS A TEST STAND-IN, NOT KUBERNETES. It accepts the command line of the real\n\
         {command} and exercises the certificates, flags, ports and kubeconfigs it is given\n\
         (TLS, client certificates, etcd over mutual TLS, health endpoints), but implements no\n\
         Kubernetes API. It exists only for oneinfra-rs end-to-end tests.\n\n\
         Usage:\n  {command} [flags]\n\nFlags:\n"
    );
    for spec in specs {
        let short = spec
            .shorthand
            .map(|c| format!("-{c}, "))
            .unwrap_or_else(|| "    ".to_string());
        let kind = match spec.kind {
            Kind::Bool | Kind::Help => "",
            Kind::Str => " string",
            Kind::File => " file",
            Kind::Int => " int",
            Kind::Float => " float",
            Kind::Duration => " duration",
            Kind::Ip => " ip",
            Kind::List => " strings",
            Kind::Array => " stringArray",
            Kind::Map => " mapStringString",
            Kind::Version => " version[=true]",
        };
        out.push_str(&format!("      {short}--{}{kind}\n", spec.name));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("300ms"), Some(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("1h2m3s"), Some(Duration::from_secs(3723)));
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("10"), None);
        assert_eq!(parse_go_duration("1x"), None);
        assert_eq!(parse_go_duration(""), None);
    }

    #[test]
    fn go_ints_and_bools() {
        assert_eq!(parse_go_int("6443"), Some(6443));
        assert_eq!(parse_go_int("-1"), Some(-1));
        assert_eq!(parse_go_int("0x10"), Some(16));
        assert_eq!(parse_go_int("64a"), None);
        assert_eq!(parse_go_bool("True"), Some(true));
        assert_eq!(parse_go_bool("yes"), None);
    }
}
