//! The node's HTTP interface: `/health` (per flow and actor status), `/flows` (the same as JSON)
//! and `/metrics` (Prometheus text). Nothing here prints configuration values.

use std::net::SocketAddr;

use actix_web::{App, HttpResponse, HttpServer, web};

use crate::metrics::METRICS;
use crate::status::{ActorState, StatusBoard};

async fn health(status: web::Data<StatusBoard>) -> HttpResponse {
    let flows = status.snapshot();
    let healthy = flows
        .values()
        .flat_map(|actors| actors.values())
        .all(|a| matches!(a.state, ActorState::Running | ActorState::Starting | ActorState::Stopped));
    let body = serde_json::json!({
        "status": if healthy { "ok" } else { "degraded" },
        "flows": flows,
    });
    // Degraded flows are reported, not hidden, but the node itself is up: 200 either way.
    HttpResponse::Ok().json(body)
}

async fn flows(status: web::Data<StatusBoard>) -> HttpResponse {
    HttpResponse::Ok().json(status.snapshot())
}

async fn metrics() -> HttpResponse {
    HttpResponse::Ok().content_type("text/plain; version=0.0.4; charset=utf-8").body(METRICS.render())
}

/// Bind and start the server inside the current actix System.
pub fn serve(addr: SocketAddr, status: StatusBoard) -> std::io::Result<actix_web::dev::Server> {
    let data = web::Data::new(status);
    let server = HttpServer::new(move || {
        App::new()
            .app_data(data.clone())
            .route("/health", web::get().to(health))
            .route("/flows", web::get().to(flows))
            .route("/metrics", web::get().to(metrics))
    })
    .workers(1)
    .disable_signals()
    .bind(addr)?
    .run();
    Ok(server)
}
