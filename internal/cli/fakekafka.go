package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/outbox-relay/outbox-relay/internal/fakekafka"
)

// newFakeKafka runs franz-go's in-process Kafka broker as a process of its
// own, so that the benchmark can tell the relay's CPU and memory from the
// broker's. It prints "listening ADDR" and runs until SIGTERM or SIGINT.
func newFakeKafka(g *globals) *cobra.Command {
	var (
		port       int
		partitions int32
		topics     []string
		autoCreate bool
	)
	cmd := &cobra.Command{
		Use:    "fake-kafka",
		Short:  "Run an in-memory Kafka broker (for the benchmark and local trials)",
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := []kfake.Opt{kfake.Ports(port)}
			if len(topics) > 0 {
				opts = append(opts, kfake.SeedTopics(partitions, topics...))
			}
			c, err := fakekafka.New(autoCreate, opts...)
			if err != nil {
				return err
			}
			defer c.Close()
			fmt.Fprintln(g.stdout, "listening", c.ListenAddrs()[0])
			<-cmd.Context().Done()
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 0, "port to listen on (0: any free one)")
	cmd.Flags().Int32Var(&partitions, "partitions", 12, "partitions of each seeded topic")
	cmd.Flags().StringSliceVar(&topics, "topics", nil, "topics to create")
	cmd.Flags().BoolVar(&autoCreate, "auto-create-topics", false,
		"create the topics a client asks for, as a broker with auto.create.topics.enable does (match the sink's auto_create_topics)")
	return cmd
}
