// Package compat lets a deployment of inviqa/kafka-outbox-relay switch to
// outbox-relay by changing its image alone: `outbox-relay run` accepts that
// relay's command-line flags (hidden), reads its environment variables
// through [config.FromInviqa], and does what they ask of the process beyond
// relaying: the one-shot cleanup and optimize jobs, the proxy sidecar
// hand-off after a job, and the idle mode of POLLING_DISABLED.
//
// The settings are used instead of a configuration file when --inviqa-env is
// given, when one of that relay's flags is, or when --config is not given and
// DB_DRIVER and DB_HOST are set. docs/inviqa-migration.md maps every setting.
package compat
