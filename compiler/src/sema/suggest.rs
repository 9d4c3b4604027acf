//! "Did you mean …?": the nearest candidate name by edit distance, the way
//! rustc picks one (distance at most a third of the name's length).

/// Edit distance with adjacent transpositions (optimal string alignment:
/// `laod` is one edit from `load`, as rustc counts it), case differences
/// counting half (rounded down).
fn distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows: two back for a transposition.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).map(|j| j * 2).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i * 2;
        for j in 1..=b.len() {
            let sub = if a[i - 1] == b[j - 1] {
                0
            } else if a[i - 1].eq_ignore_ascii_case(&b[j - 1]) {
                1
            } else {
                2
            };
            cur[j] = (prev[j - 1] + sub).min(prev[j] + 2).min(cur[j - 1] + 2);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                cur[j] = cur[j].min(before[j - 2] + 2);
            }
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()] / 2
}

/// The closest candidate to `name`, if one is close enough to be a typo.
pub fn nearest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    // A one-letter name is one edit from every other one: no suggestion.
    if name.chars().count() < 2 {
        return None;
    }
    let limit = (name.chars().count() / 3).max(1);
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        if c == name {
            continue;
        }
        let d = distance(name, c);
        if d <= limit && best.is_none_or(|(bd, bc)| d < bd || (d == bd && c < bc)) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::nearest;

    #[test]
    fn finds_typos() {
        assert_eq!(nearest("arang", ["arange", "zeros", "load"]), Some("arange"));
        assert_eq!(nearest("BLOK", ["BLOCK", "n"]), Some("BLOCK"));
        assert_eq!(nearest("xyz", ["arange", "zeros"]), None);
        assert_eq!(nearest("Load", ["load"]), Some("load"));
        // A swapped pair is one edit.
        assert_eq!(nearest("laod", ["load", "loop"]), Some("load"));
        assert_eq!(nearest("arnage", ["arange"]), Some("arange"));
    }
}
