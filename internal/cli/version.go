package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
)

func newVersion(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and Go version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			i := buildinfo.Get()
			if !asJSON {
				fmt.Fprintf(g.stdout, "version:    %s\ncommit:     %s\nbuilt:      %s\ngo:         %s\nplatform:   %s\n",
					i.Version, i.Commit, i.BuildDate, i.GoVersion, i.Platform)
				return nil
			}
			enc := json.NewEncoder(g.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(i)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
