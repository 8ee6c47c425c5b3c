package payloadschema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// paymentSchema is seed 003's payment checks: amount > 0, a 3-letter
// currency, a destination.
const paymentSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "required": ["amount", "currency", "destination"],
  "properties": {
    "amount": {"type": "number", "exclusiveMinimum": 0},
    "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    "destination": {"type": "object", "required": ["iban"], "properties": {"iban": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"}}}
  }
}`

func TestPaymentChecks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "payment.json")
	if err := os.WriteFile(path, []byte(paymentSchema), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	for payload, want := range map[string]string{
		`{"amount": 10.5, "currency": "EUR", "destination": {"iban": "DE89370400440532013000"}}`: "",
		`{"amount": 0, "currency": "EUR", "destination": {"iban": "DE89370400440532013000"}}`:    "amount",
		`{"amount": 5, "currency": "euro", "destination": {"iban": "DE89370400440532013000"}}`:   "currency",
		`{"amount": 5, "currency": "EUR", "destination": {"iban": "nope"}}`:                      "iban",
		`{"amount": 5, "currency": "EUR"}`:                                                       "destination",
		`{"amount": 5,`:                                                                          "not JSON",
	} {
		err := s.Validate([]byte(payload))
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", payload, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want an error naming %q", payload, err, want)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing schema file loaded")
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"type": 12}`), 0o600)
	if _, err := Load(bad); err == nil {
		t.Error("an invalid schema compiled")
	}
}
