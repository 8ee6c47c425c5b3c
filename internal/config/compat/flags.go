package compat

import (
	"log/slog"
	"os"
	"sort"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// ForceFlag makes run read the settings of inviqa/kafka-outbox-relay.
const ForceFlag = "inviqa-env"

// Flags are inviqa/kafka-outbox-relay's command-line flags on a command.
type Flags struct {
	cmd    *cobra.Command
	force  bool
	values map[string]*string // by variable name
}

// AddFlags registers --inviqa-env, and every flag of inviqa/kafka-outbox-relay
// hidden, on cmd. A boolean flag given alone (--cleanup) means true.
func AddFlags(cmd *cobra.Command) *Flags {
	fs := cmd.Flags()
	f := &Flags{cmd: cmd, values: map[string]*string{}}
	fs.BoolVar(&f.force, ForceFlag, false,
		"configure from the environment variables and flags of inviqa/kafka-outbox-relay (docs/inviqa-migration.md)")
	for _, v := range config.InviqaVars {
		if v.Flag == "" {
			continue
		}
		f.values[v.Env] = fs.String(v.Flag, "", "as "+v.Env+": "+v.Setting)
		if v.Bool {
			fs.Lookup(v.Flag).NoOptDefVal = "true"
		}
		_ = fs.MarkHidden(v.Flag)
	}
	return f
}

// Given returns the values of the flags given, keyed by variable name.
func (f *Flags) Given() map[string]string {
	out := map[string]string{}
	for _, v := range config.InviqaVars {
		if v.Flag != "" && f.cmd.Flags().Changed(v.Flag) {
			out[v.Env] = *f.values[v.Env]
		}
	}
	return out
}

// Active reports whether run is to use the settings of
// inviqa/kafka-outbox-relay: --inviqa-env or one of its flags is given, or
// configGiven is false and env holds its settings ([config.InviqaPresent]).
func (f *Flags) Active(configGiven bool, env func(string) (string, bool)) bool {
	return f.force || len(f.Given()) > 0 || (!configGiven && config.InviqaPresent(env))
}

// Load builds the configuration from the process environment and the flags
// given.
func (f *Flags) Load() (*config.Inviqa, error) {
	return config.FromInviqa(os.Environ(), f.Given())
}

// LogSettings logs where the configuration came from, and each setting
// accepted without effect with the reason.
func LogSettings(log *slog.Logger, in *config.Inviqa) {
	dbs := make([]string, 0, len(in.Config.Databases))
	for name := range in.Config.Databases {
		dbs = append(dbs, name)
	}
	sort.Strings(dbs)
	attrs := []any{"databases", dbs}
	switch {
	case in.Job != "":
		attrs = append(attrs, "job", in.Job)
	case in.PollingDisabled:
		attrs = append(attrs, "polling_disabled", true)
	default:
		attrs = append(attrs, "brokers", in.Config.Sinks[config.InviqaSinkName].Brokers, "admin_listen", in.Config.Admin.Listen)
	}
	log.Info("configured from the settings of inviqa/kafka-outbox-relay", attrs...)
	for _, n := range in.Notes {
		log.Info("setting accepted without effect", "variable", n.Var, "reason", n.Reason)
	}
}
