// Package api holds the request and response types of kennel's HTTP API, shared by the
// daemon (package daemon) and its clients (package client), and the API's OpenAPI
// document (OpenAPI, served at /openapi.json).
//
// The API is JSON over HTTP on a private unix socket. Errors travel as an ErrorBody whose
// Code is one of the Code constants; the message is for people and never matched:
//
//	var e *api.Error
//	if errors.As(err, &e) && e.Code == api.CodeNotFound { ... }
package api
