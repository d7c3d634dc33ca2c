package daemon

// Routes lists the served routes as "METHOD /pattern", for the OpenAPI check.
func Routes() []string {
	var out []string
	for _, r := range (&Server{}).routes() {
		out = append(out, r.method+" "+r.pattern)
	}
	return out
}
