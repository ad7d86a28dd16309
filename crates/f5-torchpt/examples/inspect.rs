//! Opens any checkpoint safely and lists what is in it: `.safetensors`, or a `torch.save` file
//! (`.pt`, `.pth`, `pytorch_model.bin`) without Python and without running its pickle.
//!
//! ```sh
//! cargo run -p f5-torchpt --example inspect -- model.pt
//! cargo run -p f5-torchpt --example inspect                  # the fixtures, one of them hostile
//! ```
//!
//! A checkpoint whose pickle names anything outside the tensor-rebuilding allow-list (the
//! fixture `malicious/evil_reduce.pt` calls `os.system`) is refused with the global it named.

use std::path::PathBuf;

use f5_torchpt::Checkpoint;

fn main() {
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let given: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let paths =
        if given.is_empty() { vec![fixtures.join("models/f5-tiny-v1/model.pt"), fixtures.join("malicious/evil_reduce.pt")] } else { given };
    let mut failed = false;
    for path in paths {
        match Checkpoint::open(&path) {
            Ok(ckpt) => {
                println!("{} ({:?}): {} tensors", path.display(), ckpt.format(), ckpt.names().count());
                for name in ckpt.names().take(5) {
                    if let Ok(info) = ckpt.meta(name) {
                        println!("  {name}: {:?} {:?}", info.dtype(), info.shape());
                    }
                }
            }
            Err(e) => {
                failed = true;
                println!("{}: refused: {e}", path.display());
            }
        }
    }
    std::process::exit(i32::from(failed && std::env::args_os().len() > 1));
}
