use leasekv_client::Client;
use std::time::{Duration, Instant};
#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let clients: usize = args.next().unwrap().parse().unwrap();
    let secs: u64 = args.next().unwrap().parse().unwrap();
    let ep: Vec<String> = args.collect();
    let mut conns = Vec::new();
    for i in 0..clients.clamp(1, 8) {
        conns.push(Client::connect(&[ep[i % ep.len()].clone()]).await.expect("connect"));
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let client = conns[c % conns.len()].clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                if client.put(format!("/b/{c}/{}", n % 1000), vec![b'v'; 256], 0, false).await.is_ok() {
                    n += 1;
                }
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    println!("{} ops/s", total / secs);
}
