// The API explorer of /docs: Swagger UI over the service's own /openapi.json (contract 06 §14).
// Loaded from this service under the page's Content-Security-Policy; no inline script.
"use strict";
window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
    // No badge from an outside validator: the page reaches this service only.
    validatorUrl: null,
  });
});
