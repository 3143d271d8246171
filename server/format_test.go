package server

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/goprovider/provider/engine"
)

// chatJSON posts a chat request with response_format rf to the real
// model and returns the status, the body, the content and finish_reason.
func chatJSON(t *testing.T, h *harness, rf string, maxTokens int, temp float64) (int, []byte, string, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"stories","messages":[{"role":"user","content":"Once upon a time"}],"max_tokens":%d,"temperature":%v,"seed":3,"response_format":%s}`, maxTokens, temp, rf)
	status, b := h.post(t, "/v1/chat/completions", body)
	var resp struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if status == 200 {
		if err := json.Unmarshal(b, &resp); err != nil || len(resp.Choices) != 1 {
			t.Fatalf("body %s: %v", b, err)
		}
		return status, b, resp.Choices[0].Message.Content, resp.Choices[0].FinishReason
	}
	return status, b, "", ""
}

// TestResponseFormatOnRealModel: through the server, a JSON schema
// constrains the real model's answer (it parses and fits), json_object
// makes it open an object,
// a generation cut by max_tokens before its grammar completes reports
// "length", and a schema the grammar engine cannot compile is a 400
// invalid_json_schema naming response_format.
func TestResponseFormatOnRealModel(t *testing.T) {
	h, _ := realServer(t, engine.Options{})
	schema := `{"type":"json_schema","json_schema":{"name":"pet","strict":true,"schema":{"type":"object",
		"properties":{"name":{"type":"string","maxLength":12},"legs":{"type":"integer","minimum":0,"maximum":8},"kind":{"enum":["cat","dog"]}},
		"required":["name","legs","kind"],"additionalProperties":false}}}`

	status, b, content, finish := chatJSON(t, h, schema, 256, 1)
	var pet struct {
		Name string `json:"name"`
		Legs int    `json:"legs"`
		Kind string `json:"kind"`
	}
	if status != 200 || finish != "stop" || json.Unmarshal([]byte(content), &pet) != nil ||
		len([]rune(pet.Name)) > 12 || pet.Legs < 0 || pet.Legs > 8 || (pet.Kind != "cat" && pet.Kind != "dog") {
		t.Fatalf("json_schema: status %d finish %q content %q (%s)", status, finish, content, b)
	}

	// stories260K writes object keys as long as it is let: json_object
	// is checked for its opening only.
	status, b, content, finish = chatJSON(t, h, `{"type":"json_object"}`, 8, 0)
	if status != 200 || finish != "length" || content == "" || content[0] != '{' {
		t.Fatalf("json_object: status %d finish %q content %q (%s)", status, finish, content, b)
	}

	status, b, content, finish = chatJSON(t, h, schema, 3, 1)
	if status != 200 || finish != "length" || json.Valid([]byte(content)) {
		t.Fatalf("cut by max_tokens: status %d finish %q content %q (%s)", status, finish, content, b)
	}

	for _, bad := range []string{
		`{"type":"string","format":"no-such-format"}`,
		`{"type":"object","propertyNames":{"maxLength":3}}`,
		`{"type":"integer","minimum":3,"maximum":1}`,
	} {
		status, b, _, _ = chatJSON(t, h, `{"type":"json_schema","json_schema":{"name":"bad","schema":`+bad+`}}`, 16, 0)
		e := decodeError(t, b)
		if status != 400 || e.Error.Code != "invalid_json_schema" || e.Error.Param == nil || *e.Error.Param != "response_format" ||
			e.Error.Message != invalidMessages["invalid_json_schema"] {
			t.Errorf("%s: status %d body %s", bad, status, b)
		}
	}
}

// TestOpenAIPythonClientParse: the official Python client's
// chat.completions.parse with a pydantic model, and a streamed json_schema
// request, on the real model: both parse into the model.
func TestOpenAIPythonClientParse(t *testing.T) {
	deps, err := filepath.Abs("../.deps/py-openai")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(deps, "pydantic")); err != nil {
		t.Fatalf("the openai package and pydantic are missing from %s: run `make setup`", deps)
	}
	h, _ := realServer(t, engine.Options{})
	cmd := exec.Command("python3", "testdata/openai_parse.py", h.http.URL+"/v1", "stories")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+deps)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("openai client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// TestOpenAINodeClientZod: the official Node client's
// chat.completions.parse with zodResponseFormat, and the same format
// streamed, on the real model.
func TestOpenAINodeClientZod(t *testing.T) {
	mods, err := filepath.Abs("../.deps/npm-openai/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(mods, "openai")); err != nil {
		t.Fatalf("the openai and zod npm packages are missing from %s: run `make setup`", mods)
	}
	// An ES module resolves packages from its own directory upwards: run a
	// copy of the script beside the packages.
	script, err := os.ReadFile("testdata/openai_zod.mjs")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(mods), "zodtest-"+filepath.Base(t.TempDir()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "openai_zod.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}
	h, _ := realServer(t, engine.Options{})
	out, err := exec.Command("node", filepath.Join(dir, "openai_zod.mjs"), h.http.URL+"/v1", "stories").CombinedOutput()
	if err != nil {
		t.Fatalf("openai node client: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
