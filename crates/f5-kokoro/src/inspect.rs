//! Recognising a Kokoro checkpoint from its tensor names, for `f5 models inspect`.

use f5_torchpt::Checkpoint;

/// What a checkpoint says about itself when it is a Kokoro model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KokoroSummary {
    /// The release's DataParallel `module.` prefix, stripped names, or parametrization names.
    pub layout: &'static str,
    /// Tensors of the model in the file.
    pub tensors: usize,
    /// Parameters of the model (82 million for the release).
    pub params: usize,
    /// Width of the text features (`bert_encoder` output; 512 for the release).
    pub hidden_dim: usize,
    /// ALBERT's hidden size and vocabulary (768 and 178 for the release).
    pub albert_hidden: usize,
    /// Rows of ALBERT's phoneme embedding.
    pub n_token: usize,
    /// Half of a voice style (128 for the release), from the AdaIN projections.
    pub style_dim: usize,
}

/// `Some` when the checkpoint holds Kokoro's five sub-models (`bert`, `bert_encoder`,
/// `predictor`, `text_encoder`, `decoder`), in any layout the loader reads.
pub fn inspect(ckpt: &Checkpoint) -> Option<KokoroSummary> {
    let names: Vec<&str> = ckpt.names().collect();
    let canon = |n: &str| f5_nn::canonical(n);
    let has = |prefix: &str| names.iter().any(|n| canon(n).starts_with(prefix));
    if !["bert.", "bert_encoder.", "predictor.", "text_encoder.", "decoder."].iter().all(|p| has(p)) {
        return None;
    }
    let shape = |canonical: &str| names.iter().find(|n| canon(n) == canonical).and_then(|n| ckpt.meta(n).ok()).map(|m| m.shape().to_vec());
    let enc = shape("bert_encoder.weight")?;
    let words = shape("bert.embeddings.word_embeddings.weight")?;
    let fc = shape("predictor.text_encoder.lstms.1.fc.weight")?;
    let layout = if names.iter().any(|n| n.contains(".module.") || n.starts_with("module.")) {
        "release (module. prefix, weight_g/weight_v)"
    } else if names.iter().any(|n| n.contains("parametrizations.weight.original")) {
        "parametrizations (original0/original1)"
    } else {
        "prefix stripped"
    };
    Some(KokoroSummary {
        layout,
        tensors: names.len(),
        params: names.iter().filter_map(|n| ckpt.meta(n).ok()).map(|m| m.numel()).sum(),
        hidden_dim: *enc.first()?,
        albert_hidden: *enc.get(1)?,
        n_token: *words.first()?,
        style_dim: *fc.get(1)?,
    })
}
