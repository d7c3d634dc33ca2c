package api_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/kennel-dev/kennel/api"
)

// TestOpenAPIIsValidAndMatchesTheTypes: the document is valid OpenAPI (kin-openapi's
// loader and validator), every object schema is closed (additionalProperties false), and
// each schema names exactly the JSON fields of the Go type of the same name, so a field
// added to a type and not to the document fails here, not in a client.
func TestOpenAPIIsValidAndMatchesTheTypes(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	types := []any{
		api.Error{}, api.ErrorBody{}, api.Span{}, api.Mount{}, api.Transport{}, api.Local{}, api.Docker{}, api.SSH{}, api.Containerd{}, api.Kubernetes{}, api.Limits{},
		api.CreateSession{}, api.RunningJob{}, api.Kernel{}, api.Session{}, api.SessionList{},
		api.RunCell{}, api.Exception{}, api.Cell{}, api.Output{}, api.CellReply{}, api.Event{},
		api.RunJob{}, api.JobEnd{}, api.Job{}, api.JobList{}, api.OutputPage{}, api.StopReply{}, api.Upgrade{},
		api.CreateChild{}, api.Child{}, api.Conflict{}, api.HandBack{}, api.HostState{},
		api.Function{}, api.FunctionList{}, api.CallFunction{}, api.CallReply{}, api.CallError{}, api.SessionEvent{},
	}
	covered := map[string]bool{}
	for _, v := range types {
		typ := reflect.TypeOf(v)
		name := typ.Name()
		covered[name] = true
		ref := doc.Components.Schemas[name]
		if ref == nil {
			t.Errorf("%s: no schema", name)
			continue
		}
		sc := ref.Value
		if sc.AdditionalProperties.Has == nil || *sc.AdditionalProperties.Has {
			t.Errorf("%s: the schema is open (additionalProperties is not false)", name)
		}
		var fields []string
		for f := range typ.Fields() {
			tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if !f.IsExported() || tag == "-" {
				continue
			}
			if tag == "" {
				tag = f.Name
			}
			fields = append(fields, tag)
		}
		var props []string
		for p := range sc.Properties {
			props = append(props, p)
		}
		sort.Strings(fields)
		sort.Strings(props)
		if !slices.Equal(fields, props) {
			t.Errorf("%s: fields %v, schema properties %v", name, fields, props)
		}
	}
	for name := range doc.Components.Schemas {
		if !covered[name] {
			t.Errorf("schema %s: no type of that name is checked", name)
		}
	}
}

// TestErrorCodesAreDocumented: the document's Error.code enum lists exactly the Code
// constants declared in errors.go.
func TestErrorCodesAreDocumented(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
		got = append(got, v.(string))
	}
	want := constsOf(t, "errors.go", "Code")
	sort.Strings(got)
	sort.Strings(want)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("Error.code enum %v, want the Code constants %v", got, want)
	}
}

// TestHostStatusesAreDocumented: the document's HostState.status enum lists exactly the
// HostStatus constants declared in hosts.go.
func TestHostStatusesAreDocumented(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range doc.Components.Schemas["HostState"].Value.Properties["status"].Value.Enum {
		got = append(got, v.(string))
	}
	want := constsOf(t, "hosts.go", "HostStatus")
	sort.Strings(got)
	sort.Strings(want)
	if len(want) == 0 || !slices.Equal(got, want) {
		t.Fatalf("HostState.status enum %v, want the HostStatus constants %v", got, want)
	}
	for _, s := range want {
		if settled := api.HostStatus(s).Settled(); settled != (s != "unknown" && s != "probing") {
			t.Errorf("HostStatus(%q).Settled() = %v", s, settled)
		}
	}
}

// constsOf returns the values of the string constants of type typ declared in file.
func constsOf(t *testing.T, file, typ string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != typ {
				continue
			}
			for _, v := range vs.Values {
				lit := v.(*ast.BasicLit)
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, s)
			}
		}
	}
	return out
}
