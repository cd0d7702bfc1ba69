//! The API's OpenAPI 3.1 document, generated from the handlers'
//! `#[utoipa::path]` and the bodies' `ToSchema`, served at
//! `/api/v1/openapi.json` to anyone (it holds no data).

use axum::http::StatusCode;
use axum::response::Response;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{actions, json, reads};

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "cronlease dashboard API",
        description = "The dashboard's data and actions as JSON: every replica serving the dashboard (`[daemon] dashboard_listen`) serves it under `/api/v1/`. Actions need `Authorization: Bearer <token>` with one of the dashboard's tokens whose role takes them (`viewer`: none; `operator`: trigger, pause, resume, kill; `admin`: every action, drain and undrain too); reads need a token when `[daemon] dashboard_read = \"token\"`. A token limited to some jobs (`jobs = [\"billing-*\"]`) sees the others nowhere: they are absent from its lists and 404 for it. Errors are `{\"error\": {\"code\": \"…\", \"message\": \"…\"}}`.",
        license(name = "MIT OR Apache-2.0", identifier = "MIT OR Apache-2.0")
    ),
    paths(
        openapi,
        reads::jobs,
        reads::job,
        reads::history,
        reads::explain,
        reads::runs,
        reads::replicas,
        reads::locks,
        actions::trigger,
        actions::pause,
        actions::resume,
        actions::kill,
        actions::drain,
        actions::undrain,
    ),
    components(schemas(super::ErrorCode)),
    modifiers(&BearerToken),
    tags(
        (name = "reads", description = "What the dashboard's pages show"),
        (name = "actions", description = "What a token may do: each action names the role it needs"),
        (name = "document", description = "This document"),
    )
)]
pub(in crate::dashboard) struct ApiDoc;

/// The `bearer` security scheme the actions name.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "One of the dashboard's tokens: [daemon] dashboard_token_env or dashboard_token_file (role admin), or a [[dashboard.tokens]] entry (its role and jobs)",
                    ))
                    .build(),
            ),
        );
    }
}

/// `GET /api/v1/openapi.json`: this document.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "document",
    responses((status = 200, description = "The OpenAPI 3.1 document", content_type = "application/json", body = Object)),
    security(())
)]
pub(super) async fn openapi() -> Response {
    json(StatusCode::OK, &ApiDoc::openapi())
}
