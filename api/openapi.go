package api

import _ "embed"

// OpenAPI is the API's OpenAPI 3 document, served at GET /openapi.json. A test checks that
// every route it names is served and every served route is in it.
//
//go:embed openapi.json
var OpenAPI []byte
