//! The two XML documents of S3 that are read: a page of `ListObjectsV2` and an error.

/// One page of a listing.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ListPage {
    /// Key and size of each object.
    pub objects: Vec<(String, u64)>,
    pub truncated: bool,
    pub next: Option<String>,
}

/// The text of every `<tag>...</tag>` in `xml`, in order (no nesting of the same tag).
fn elements<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let Some(end) = after.find(&close) else {
            break;
        };
        out.push(&after[..end]);
        rest = &after[end + close.len()..];
    }
    out
}

/// XML's five entities and numeric character references.
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let Some(end) = tail.find(';') else {
            out.push_str(tail);
            return out;
        };
        let entity = &tail[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => out.push(c),
            None => out.push_str(&tail[..=end]),
        }
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    out
}

pub fn parse_list(xml: &str) -> ListPage {
    let objects = elements(xml, "Contents")
        .into_iter()
        .filter_map(|c| {
            let key = elements(c, "Key").first().map(|k| unescape(k))?;
            let size = elements(c, "Size")
                .first()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            Some((key, size))
        })
        .collect();
    ListPage {
        objects,
        truncated: elements(xml, "IsTruncated").first().map(|s| s.trim()) == Some("true"),
        next: elements(xml, "NextContinuationToken")
            .first()
            .map(|t| unescape(t)),
    }
}

/// `Code` and `Message` of an error document (empty when there are none).
pub fn parse_error(xml: &str) -> (String, String) {
    let first = |tag| {
        elements(xml, tag)
            .first()
            .map(|s| unescape(s))
            .unwrap_or_default()
    };
    let message = first("Message");
    let message = if message.is_empty() {
        xml.chars().take(200).collect()
    } else {
        message
    };
    (first("Code"), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page_reads_its_keys_sizes_and_continuation() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix>p/</Prefix>
<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
<Contents><Key>p/a&amp;b.oisnap</Key><LastModified>2026-11-25T00:00:00.000Z</LastModified><Size>42</Size></Contents>
<Contents><Key>p/c</Key><Size>7</Size></Contents>
<NextContinuationToken>tok&#x3D;1</NextContinuationToken></ListBucketResult>"#;
        assert_eq!(
            parse_list(xml),
            ListPage {
                objects: vec![("p/a&b.oisnap".into(), 42), ("p/c".into(), 7)],
                truncated: true,
                next: Some("tok=1".into()),
            }
        );
        assert_eq!(parse_list("<ListBucketResult/>"), ListPage::default());
    }

    #[test]
    fn an_error_names_its_code_and_message() {
        let xml = "<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>";
        assert_eq!(
            parse_error(xml),
            (
                "NoSuchBucket".to_string(),
                "The specified bucket does not exist".to_string()
            )
        );
        assert_eq!(parse_error("oops"), (String::new(), "oops".to_string()));
    }
}
