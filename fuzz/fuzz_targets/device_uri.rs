//! `halcyon::driver::parse_uri` on arbitrary UTF-8. It never panics; a refusal is
//! `InvalidArgument` quoting the URI; what it accepts splits into a non-empty driver id of
//! ASCII letters, digits, `-` and `_` and an index, is the id itself or `id://rest` with
//! `rest` naming the index, and the canonical forms `id://index` (and `id` alone for index 0)
//! parse back to the same parts. An empty `DriverRegistry` refuses the URI with the parse error
//! or `NotFound`, never creating anything.

#![no_main]

use halcyon::driver::{parse_uri, DriverRegistry};
use halcyon::StatusCode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(uri) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = parse_uri(uri);
    match &parsed {
        Ok((id, index)) => {
            let (id, index) = (*id, *index);
            assert!(!id.is_empty());
            assert!(id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
            match uri.split_once("://") {
                None => assert_eq!((id, index), (uri, 0)),
                Some((head, rest)) => {
                    assert_eq!(head, id);
                    assert_eq!(rest.parse::<u32>().ok(), Some(index));
                }
            }
            let canonical = format!("{id}://{index}");
            assert_eq!(parse_uri(&canonical).ok(), Some((id, index)));
            if index == 0 {
                assert_eq!(parse_uri(id).ok(), Some((id, 0)));
            }
        }
        Err(error) => {
            assert_eq!(error.code(), StatusCode::InvalidArgument, "{error}");
            assert!(error.message().contains(&format!("'{uri}'")), "{error}");
        }
    }
    let error = DriverRegistry::new()
        .create_device(uri)
        .expect_err("an empty registry creates no device");
    match parsed {
        Ok(_) => assert_eq!(error.code(), StatusCode::NotFound, "{error}"),
        Err(parse_error) => assert_eq!(error.message(), parse_error.message()),
    }
});
