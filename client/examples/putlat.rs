use leasekv_client::Client;
use std::time::Instant;
#[tokio::main]
async fn main() {
    let ep: Vec<String> = std::env::args().skip(1).collect();
    let c = Client::connect(&ep).await.expect("connect");
    let mut l = Vec::new();
    for i in 0..3000 {
        let t = Instant::now();
        c.put(format!("/k/{}", i % 100), vec![b'v'; 256], 0, false).await.expect("put");
        l.push(t.elapsed().as_secs_f64() * 1e3);
    }
    l.sort_by(|a, b| a.total_cmp(b));
    println!("p50 {:.3} p90 {:.3} p99 {:.3}", l[l.len() / 2], l[l.len() * 9 / 10], l[l.len() * 99 / 100]);
}
