//! The aligned text tables every scenario prints.

/// Prints rows under a header, columns padded, the first left-aligned.
pub fn print_table(header: &[String], rows: &[Vec<String>]) {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |row: &[String]| {
        let cells: Vec<String> = (0..columns)
            .map(|i| {
                let cell = row.get(i).map_or("", String::as_str);
                let pad = widths[i] - cell.chars().count();
                format!("{cell}{}", " ".repeat(pad))
            })
            .collect();
        println!("  {}", cells.join(" | ").trim_end());
    };
    line(header);
    println!(
        "  {}",
        widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("-+-")
    );
    for row in rows {
        line(row);
    }
}
