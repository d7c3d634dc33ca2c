package api

import _ "embed"

// OpenAPI is the API's OpenAPI 3.1 document, served at GET /openapi.json. It lists every
// reply the daemon sends: each operation's statuses and bodies, and in x-kennel-unrouted
// the replies to a request no route takes (404 no_route, 405 method_not_allowed). The
// daemon's tests check that every route it names is served and every served route is in
// it, and validate every request and reply of a run of the real daemon against it
// (kin-openapi's openapi3filter), failing on any status or body it does not list.
//
//go:embed openapi.json
var OpenAPI []byte
