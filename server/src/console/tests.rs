use super::*;

#[test]
fn every_read_only_path_is_a_gateway_route_and_none_of_them_writes() {
    let paths: Vec<&str> = crate::gateway::routes().into_iter().map(|(path, _)| path).collect();
    for path in READ_ONLY_PATHS {
        assert!(paths.contains(path), "{path} is not a gateway route");
    }
    // The exact list: a path added here must be one that cannot change anything (tests/integration/console.rs
    // checks that every other gateway path is refused).
    let mut allowed = READ_ONLY_PATHS.to_vec();
    allowed.sort_unstable();
    assert_eq!(
        allowed,
        [
            "/auth/authenticate",
            "/auth/status",
            "/cluster/member/list",
            "/election/leader",
            "/kv/lease/leases",
            "/kv/lease/timetolive",
            "/kv/range",
            "/lease/leases",
            "/lease/timetolive",
            "/leasekv/electionstatus",
            "/leasekv/listleases",
            "/leasekv/resolvename",
            "/maintenance/status",
            "/watch",
        ]
    );
}

#[test]
fn the_page_its_script_and_its_styles_are_embedded_with_their_types() {
    for (file, mime) in [
        ("index.html", "text/html"),
        ("main.js", "javascript"),
        ("keys.js", "javascript"),
        ("console.css", "text/css"),
        ("favicon.svg", "image/svg+xml"),
    ] {
        let content = Assets::get(file).unwrap_or_else(|| panic!("{file} is embedded"));
        assert!(content.metadata.mimetype().contains(mime), "{file}: {}", content.metadata.mimetype());
        assert!(!content.data.is_empty());
    }
}

#[test]
fn the_page_loads_nothing_from_outside() {
    let page = String::from_utf8(Assets::get("index.html").expect("index.html").data.to_vec()).expect("UTF-8");
    for outside in ["http://", "https://", "//cdn"] {
        assert!(!page.contains(outside), "index.html refers to {outside}");
    }
}

#[test]
fn every_gateway_route_is_counted_as_reading_or_writing() {
    // tests/integration/console.rs lists the 41 writing paths and expects each refused by a read-only
    // console; a route added to the gateway must join one list or the other.
    let routes = crate::gateway::routes().len();
    assert_eq!(
        routes,
        READ_ONLY_PATHS.len() + 41,
        "a new gateway route: add it to READ_ONLY_PATHS if it only reads, else to WRITING_PATHS in tests/integration/console.rs"
    );
}
