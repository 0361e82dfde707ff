//! `skyhook-agent`: drop-in replacement for the Python Skyhook agent (work in progress).
fn main() {
    eprintln!("usage: skyhook-agent MODE [ROOT_MOUNT] COPY_DIR [INTERRUPT_DATA]");
    std::process::exit(2);
}
