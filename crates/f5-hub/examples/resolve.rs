//! Resolves a model name the way `f5` does and prints the files it stands for.
//!
//! ```text
//! cargo run -p f5-hub --example resolve -- SWivid/F5-TTS/F5TTS_v1_Base/model_1250000.safetensors
//! cargo run -p f5-hub --example resolve -- --vocoder charactr/vocos-mel-24khz
//! ```

use f5_hub::{Hub, Progress};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (vocoder, name) = match args.as_slice() {
        [flag, name] if flag == "--vocoder" => (true, name.as_str()),
        [name] => (false, name.as_str()),
        _ => {
            eprintln!("usage: resolve [--vocoder] NAME");
            std::process::exit(2);
        }
    };
    let hub = Hub::from_env().with_progress(|event| match event {
        Progress::Start { file, total, resumed_from } => eprintln!("fetching {file} ({total:?} bytes, from {resumed_from})"),
        Progress::Finish { file } => eprintln!("fetched {file}"),
        Progress::Advance { .. } => {}
    });
    let result = if vocoder {
        hub.resolve_vocoder(name).map(|v| format!("weights {}\nconfig  {:?}", v.weights.display(), v.config))
    } else {
        hub.resolve_model(name, None)
            .map(|m| format!("checkpoint {}\nvocab      {:?}\nkind       {:?}", m.checkpoint.display(), m.vocab, m.kind))
    };
    match result {
        Ok(text) => println!("{text}"),
        Err(error) => {
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("error: {message}");
            std::process::exit(1);
        }
    }
}
