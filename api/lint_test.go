package api_test

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi/datamodel"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/api"
)

// The document is linted with a second, independent OpenAPI library
// (libopenapi) on top of kin-openapi's validation in api.Load: what one
// parser forgives, the other may not, and the rules below are ours.
//
// lint returns every rule the document breaks, one line each:
//   - it builds as an OpenAPI 3 model, and every $ref resolves;
//   - every operation has a unique operationId, a summary and a
//     description;
//   - every response has a description;
//   - every 4xx and 5xx response offers application/problem+json with the
//     Problem schema (itself or in an allOf), and no response narrows
//     `code` to a closed enum: the set of codes grows, and a client must
//     not break on a new one (x-extensible-enum lists the known ones);
//   - every operation documents 405 (a method the path does not serve),
//     every /v1 operation 401, 500 and 503 (the database, or the PSP, is
//     unavailable), and every operation with a request body 400, 413 and
//     415.
func lint(spec []byte) []string {
	var out []string
	// Problems come back as errors; the library's own log would only repeat
	// them on stderr.
	doc, err := libopenapi.NewDocumentWithConfiguration(spec, &datamodel.DocumentConfiguration{
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return []string{"parse: " + err.Error()}
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		out = append(out, "build model: "+oneLine(err.Error()))
	}
	if model == nil {
		return out
	}
	if idx := model.Index; idx != nil {
		for _, e := range idx.GetReferenceIndexErrors() {
			out = append(out, "reference: "+oneLine(e.Error()))
		}
		if r := idx.GetResolver(); r != nil {
			for _, e := range r.GetResolvingErrors() {
				out = append(out, "resolve: "+oneLine(e.Error()))
			}
		}
	}
	if model.Model.Paths == nil || model.Model.Paths.PathItems == nil {
		return append(out, "no paths")
	}
	ids := map[string]string{}
	for path, item := range model.Model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			name := strings.ToUpper(method) + " " + path
			out = append(out, lintOperation(name, path, op)...)
			switch prev, dup := ids[op.OperationId]; {
			case op.OperationId == "":
				out = append(out, name+": no operationId")
			case dup:
				out = append(out, fmt.Sprintf("%s: operationId %q also used by %s", name, op.OperationId, prev))
			default:
				ids[op.OperationId] = name
			}
		}
	}
	return out
}

func lintOperation(name, path string, op *v3.Operation) []string {
	var out []string
	if strings.TrimSpace(op.Summary) == "" {
		out = append(out, name+": no summary")
	}
	if strings.TrimSpace(op.Description) == "" {
		out = append(out, name+": no description")
	}
	if op.Responses == nil || op.Responses.Codes == nil {
		return append(out, name+": no responses")
	}
	have := map[string]bool{}
	for code, resp := range op.Responses.Codes.FromOldest() {
		have[code] = true
		where := name + " " + code
		if strings.TrimSpace(resp.Description) == "" {
			out = append(out, where+": no description")
		}
		status, err := strconv.Atoi(code)
		if err != nil {
			out = append(out, where+": response key is not a status code")
			continue
		}
		if status < 400 {
			continue
		}
		var mt *v3.MediaType
		if resp.Content != nil {
			mt = resp.Content.GetOrZero("application/problem+json")
		}
		if mt == nil || mt.Schema == nil {
			out = append(out, where+": no application/problem+json body")
			continue
		}
		if !isProblem(mt.Schema) {
			out = append(out, where+": application/problem+json body is not the Problem schema")
		}
		if closedCode(mt.Schema) {
			out = append(out, where+": `code` is a closed enum; list known codes in x-extensible-enum")
		}
	}
	want := []string{"405"}
	if strings.HasPrefix(path, "/v1/") {
		want = append(want, "500", "503")
		// Every /v1 operation takes an API key, but a PSP's webhook,
		// which its PSP's signature stands for.
		if !strings.HasPrefix(path, "/v1/psp_webhooks/") {
			want = append(want, "401")
		}
	}
	if op.RequestBody != nil {
		want = append(want, "400", "413", "415")
	}
	for _, code := range want {
		if !have[code] {
			out = append(out, name+": does not document "+code)
		}
	}
	return out
}

const problemRef = "#/components/schemas/Problem"

// isProblem reports whether s is the Problem schema, or an allOf that
// includes it.
func isProblem(s *base.SchemaProxy) bool {
	if s.IsReference() {
		return s.GetReference() == problemRef
	}
	sch := s.Schema()
	if sch == nil {
		return false
	}
	return slices.ContainsFunc(sch.AllOf, func(p *base.SchemaProxy) bool {
		return p.IsReference() && p.GetReference() == problemRef
	})
}

// closedCode reports whether s, or a part of its allOf, restricts the
// `code` member to an enum.
func closedCode(s *base.SchemaProxy) bool {
	sch := s.Schema()
	if sch == nil {
		return false
	}
	if sch.Properties != nil {
		if c := sch.Properties.GetOrZero("code"); c != nil && c.Schema() != nil && len(c.Schema().Enum) > 0 {
			return true
		}
	}
	return slices.ContainsFunc(sch.AllOf, closedCode)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func TestOpenAPILint(t *testing.T) {
	t.Parallel()
	require.Empty(t, lint(api.Spec))
}

// The rules catch what they promise to: each broken copy of the document
// is reported.
func TestOpenAPILintCatchesBrokenDocuments(t *testing.T) {
	t.Parallel()
	spec := string(api.Spec)
	for name, tc := range map[string]struct{ old, new, want string }{
		"unresolved $ref": {
			old: "$ref: '#/components/responses/Unauthorized'", new: "$ref: '#/components/responses/Nobody'",
			want: "Nobody",
		},
		"missing operationId": {
			old: "operationId: getCharge", new: "x-was-operation-id: getCharge",
			want: "GET /v1/charges/{id}: no operationId",
		},
		"missing description": {
			// A description of white space only is none.
			old: "      description: |\n        Answers 200 as long as the process serves HTTP", new: "      description: ' '\n      x-was: |\n        Answers 200 as long as the process serves HTTP",
			want: "GET /healthz: no description",
		},
		"closed code enum": {
			old: "x-extensible-enum: [unauthorized]", new: "enum: [unauthorized]",
			want: "closed enum",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Contains(t, spec, tc.old, "the document changed: update this case")
			problems := lint([]byte(strings.Replace(spec, tc.old, tc.new, 1)))
			require.NotEmpty(t, problems)
			require.Contains(t, strings.Join(problems, "\n"), tc.want)
		})
	}
}
