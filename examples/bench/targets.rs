//! Targets: a figure, its bound and the verdict; how they are printed.

use serde_json::{Value, json};

/// One target: the figure, the bound, the verdict.
pub struct Target {
    pub name: String,
    pub value: String,
    pub bound: String,
    pub pass: bool,
}

impl Target {
    pub fn new(name: &str, value: String, bound: &str, pass: bool) -> Target {
        Target {
            name: name.to_string(),
            value,
            bound: bound.to_string(),
            pass,
        }
    }

    pub fn json(&self) -> Value {
        json!({"name": self.name, "value": self.value, "target": self.bound, "pass": self.pass})
    }
}

pub fn verdict(pass: bool) -> String {
    if pass { "PASS" } else { "FAIL" }.to_string()
}

/// The targets as rows of a metric / value / target / verdict table.
pub fn target_rows(targets: &[Target]) -> Vec<Vec<String>> {
    targets
        .iter()
        .map(|target| {
            vec![
                format!("▸ {}", target.name),
                target.value.clone(),
                target.bound.clone(),
                verdict(target.pass),
            ]
        })
        .collect()
}

pub fn print_targets(targets: &[Target]) {
    let pass = targets.iter().all(|t| t.pass);
    let failed: Vec<&str> = targets
        .iter()
        .filter(|t| !t.pass)
        .map(|t| t.name.as_str())
        .collect();
    if pass {
        println!("  verdict: PASS ({} targets)", targets.len());
    } else {
        println!("  verdict: FAIL ({})", failed.join(", "));
    }
}
