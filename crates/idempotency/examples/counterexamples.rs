//! Writes the counterexamples the teaching page draws (lesson 6, "What goes
//! wrong without each rule") to `web/model/counterexamples.json`, from the
//! model `tests/model` checks:
//!
//! ```sh
//! cargo run -p idempotency --example counterexamples
//! ```
//!
//! The model test `the_pages_counterexamples_are_what_the_model_finds_now`
//! fails when the file is not what this would write.

// The test target's model, shared as it is; the page uses part of it.
#![allow(dead_code)]

#[path = "../tests/model/machine/mod.rs"]
mod machine;

use machine::page;

fn main() {
    let all = page::counterexamples();
    let text = serde_json::to_string_pretty(&all).expect("JSON") + "\n";
    let path = std::path::Path::new(page::FILE);
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("web/model");
    std::fs::write(path, text).expect("the page's file");
    for c in all["counterexamples"].as_array().expect("a list") {
        println!(
            "{}: {} rows, {} states explored",
            c["id"],
            c["rows"].as_array().map_or(0, Vec::len),
            c["states_explored"]
        );
    }
    println!("wrote web/model/counterexamples.json");
}
