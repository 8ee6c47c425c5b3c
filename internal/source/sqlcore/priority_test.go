package sqlcore

import "testing"

func TestLikePattern(t *testing.T) {
	for class, want := range map[string]string{
		"kitchen.task.*": "kitchen.task.%",
		"event.*.moved":  "event.%.moved",
		"exact":          "exact",
		"100%_done!":     "100!%!_done!!",
		"*":              "%",
	} {
		if got := LikePattern(class); got != want {
			t.Errorf("LikePattern(%q) = %q, want %q", class, got, want)
		}
	}
}
