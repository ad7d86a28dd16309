//! The settings file: `$F5_HOME/config.toml`, or the file `--config PATH` names, holding the
//! defaults a user would otherwise repeat on every call (`model`, `vocoder`, `device`,
//! `precision`, `voice`). A flag given on the command line always wins over the file, and the
//! file over the built-in defaults.
//!
//! The file is read by hand from a `toml::Table` rather than through a derived struct so that
//! every mistake is one line naming the file and the key (serde's messages span several lines
//! with a source excerpt).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use clap::parser::ValueSource;
use clap::ArgMatches;

use crate::{Cli, Command};

/// The keys the file may hold, in the order the documentation lists them.
pub const KEYS: [&str; 5] = ["model", "vocoder", "device", "precision", "voice"];

/// Defaults read from the settings file; `None` where the file says nothing.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where the settings came from (for messages); `None` when there is no file.
    pub file: Option<PathBuf>,
    pub model: Option<String>,
    pub vocoder: Option<String>,
    pub device: Option<String>,
    pub precision: Option<String>,
    pub voice: Option<String>,
}

impl Config {
    /// `--config PATH` when given (it must exist), else `$F5_HOME/config.toml` when it exists,
    /// else no settings at all.
    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        let path = match explicit {
            Some(p) => {
                if !p.is_file() {
                    bail!("--config {}: no such file", p.display());
                }
                p.to_path_buf()
            }
            None => {
                let p = f5_hub::HubConfig::from_env().f5_home.join("config.toml");
                if !p.is_file() {
                    return Ok(Config::default());
                }
                p
            }
        };
        let text = crate::limits::read_text(&path)?;
        Config::parse(&text, &path)
    }

    /// The settings in `text`, read from `path` (named in every error).
    pub fn parse(text: &str, path: &Path) -> Result<Config> {
        let file = path.display();
        let table: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => {
                let line = e.span().map(|s| text[..s.start.min(text.len())].lines().count().max(1));
                let message = e.message().trim().replace('\n', " ");
                match line {
                    Some(n) => bail!("{file}: line {n}: {message}"),
                    None => bail!("{file}: {message}"),
                }
            }
        };
        let mut config = Config { file: Some(path.to_path_buf()), ..Config::default() };
        for (key, value) in &table {
            let Some(value) = value.as_str() else {
                bail!("{file}: `{key}` must be a string (e.g. {key} = \"…\"), not a {}", value.type_str());
            };
            if value.trim().is_empty() {
                bail!("{file}: `{key}` is empty");
            }
            let value = value.to_string();
            match key.as_str() {
                "model" => config.model = Some(value),
                "vocoder" => config.vocoder = Some(value),
                "voice" => config.voice = Some(value),
                "device" => {
                    if !is_device(&value) {
                        bail!("{file}: `device` is {value:?}; use cpu, cuda or cuda:N");
                    }
                    config.device = Some(value);
                }
                "precision" => {
                    if !matches!(value.as_str(), "f32" | "bf16" | "int8") {
                        bail!("{file}: `precision` is {value:?}; use f32, bf16 or int8");
                    }
                    config.precision = Some(value);
                }
                other => bail!("{file}: unknown key `{other}` (the keys are {})", KEYS.join(", ")),
            }
        }
        Ok(config)
    }
}

impl Config {
    /// `cli` with the settings filled in wherever the command line left a flag out (`matches`
    /// tells a flag typed, or set through its environment variable, from a built-in default).
    pub fn apply(&self, mut cli: Cli, matches: &ArgMatches) -> Cli {
        let given = |m: &ArgMatches, id: &str| matches!(m.value_source(id), Some(ValueSource::CommandLine | ValueSource::EnvVariable));
        let set = |target: &mut String, m: &ArgMatches, id: &str, value: &Option<String>| {
            if let (false, Some(v)) = (given(m, id), value) {
                *target = v.clone();
            }
        };
        match &mut cli.command {
            Command::Synth(a) => {
                if let Some(m) = matches.subcommand_matches("synth") {
                    set(&mut a.model.name, m, "model", &self.model);
                    set(&mut a.run.device, m, "device", &self.device);
                    set(&mut a.run.precision, m, "precision", &self.precision);
                }
                // The file's vocoder is a default for F5 models; it is no mistake when the model
                // turns out to be Kokoro (an explicit --vocoder then is).
                a.model.default_vocoder = self.vocoder.clone();
                if a.voice.is_none() && a.reference.is_none() {
                    a.voice = self.voice.clone();
                }
            }
            Command::Batch(a) => {
                if let Some(m) = matches.subcommand_matches("batch") {
                    set(&mut a.model.name, m, "model", &self.model);
                    set(&mut a.run.device, m, "device", &self.device);
                    set(&mut a.run.precision, m, "precision", &self.precision);
                }
                a.model.default_vocoder = self.vocoder.clone();
                if a.voice.is_none() {
                    a.voice = self.voice.clone();
                }
            }
            Command::Serve(a) => {
                if let Some(m) = matches.subcommand_matches("serve") {
                    set(&mut a.device, m, "device", &self.device);
                    set(&mut a.precision, m, "precision", &self.precision);
                }
                if a.model.is_empty() {
                    a.model.extend(self.model.clone());
                }
                a.default_vocoder = self.vocoder.clone();
            }
            _ => {}
        }
        cli
    }
}

/// `cpu`, `cuda` or `cuda:N`: what `--device` takes (whether this build and machine can run it
/// is checked when a model loads, as for the flag).
fn is_device(value: &str) -> bool {
    match value {
        "cpu" | "cuda" => true,
        _ => value.strip_prefix("cuda:").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        Config::parse(text, Path::new("/home/u/.f5/config.toml"))
    }

    #[test]
    fn every_key_is_read() {
        let c = parse("model = \"m\"\nvocoder = \"v\"\ndevice = \"cuda:1\"\nprecision = \"bf16\"\nvoice = \"af_sky\"\n").unwrap();
        assert_eq!(
            (c.model.as_deref(), c.vocoder.as_deref(), c.device.as_deref(), c.precision.as_deref(), c.voice.as_deref()),
            (Some("m"), Some("v"), Some("cuda:1"), Some("bf16"), Some("af_sky"))
        );
        assert_eq!(parse("").unwrap(), Config { file: Some("/home/u/.f5/config.toml".into()), ..Config::default() });
    }

    #[test]
    fn mistakes_are_one_line_naming_file_and_key() {
        for (text, expected) in [
            ("modle = \"x\"", "unknown key `modle`"),
            ("device = \"gpu\"", "`device` is \"gpu\""),
            ("device = \"cuda:\"", "`device`"),
            ("precision = \"f16\"", "`precision` is \"f16\""),
            ("model = 3", "`model` must be a string"),
            ("voice = \"\"", "`voice` is empty"),
            ("model = \"unterminated", "line 1"),
            ("model = \"a\"\n\nvoice = = 2", "line 3"),
        ] {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(e.starts_with("/home/u/.f5/config.toml: ") && e.contains(expected), "{text:?}: {e}");
            assert_eq!(e.lines().count(), 1, "{text:?}: {e}");
        }
    }
}
