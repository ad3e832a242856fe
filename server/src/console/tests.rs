use super::*;

#[test]
fn every_read_only_path_is_a_gateway_route_and_none_of_them_writes() {
    let paths: Vec<&str> = crate::gateway::routes().into_iter().map(|(path, _)| path).collect();
    for path in READ_ONLY_PATHS {
        assert!(paths.contains(path), "{path} is not a gateway route");
    }
    for writing in ["/kv/put", "/kv/deleterange", "/kv/txn", "/lease/revoke", "/lease/keepalive", "/auth/enable"] {
        assert!(!READ_ONLY_PATHS.contains(&writing), "{writing} writes");
    }
}

#[test]
fn the_page_its_script_and_its_styles_are_embedded_with_their_types() {
    for (file, mime) in
        [("index.html", "text/html"), ("main.js", "javascript"), ("keys.js", "javascript"), ("console.css", "text/css")]
    {
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
