// Package config reads the provider's configuration file: TOML that gives
// `provider serve` the values of its flags, so a long command line can live
// in a file. Flags given on the command line override the file.
//
// The file is provider/config.toml under the user's configuration
// directory ($XDG_CONFIG_HOME, else ~/.config; see DefaultPath), or the
// file --config names. Its keys are those of the reference provider where
// they mean something here, and ours beside them in the same sections:
//
//	key                                  sets                          origin
//	[server]    addr                     --addr                        ours
//	            no_auth                  --no-auth                     ours
//	            token_file               --token-file                  ours
//	[backend]   port                     --addr (the port; host kept)  reference
//	            model                    --model                       reference
//	            enabled_models           --model (joined after model)  reference
//	            models_dir               --models-dir                  ours
//	            idle_timeout_mins        --idle-unload (minutes)       reference
//	            max_concurrent           --max-concurrent              ours
//	            max_slots                --max-slots                   ours
//	            kv_bytes                 --kv-bytes                    ours
//	            device                   --device                      ours
//	            step_tokens              --step-tokens                 ours
//	            continuous_batching      ignored                       reference
//	[coordinator] url                    --coordinator                 reference
//	            heartbeat_interval_secs  ignored                       reference
//	[cache]     prefix                   PROVIDER_PREFIX_CACHE (false 0, true 1)      ours
//	            ssd                      PROVIDER_PREFIX_CACHE_SSD (false 0, true 1)  ours
//	            ram_bytes                --prefix-cache-bytes          ours
//	[provider]  name                     ignored                       reference
//	            memory_reserve_gb        ignored                       reference
//	            auto_update              ignored                       reference
//	[schedule]  (the whole section)      ignored                       reference
//
// For example:
//
//	[server]
//	addr = "127.0.0.1:8100"
//
//	[backend]
//	model = "~/models/Qwen3-8B-4bit"
//	max_concurrent = 16
//	idle_timeout_mins = 30
//
//	[cache]
//	ssd = false
//
// Paths are used as written (relative ones against the working directory,
// as on the command line) except that a leading ~/ is the home directory.
// idle_timeout_mins = 0 is a zero duration, which the reference reads as
// never.
//
// # Invariants
//
//   - The key table in config.go is the one place a key is mapped; this
//     comment lists it and a test holds the two equal.
//   - A key of the reference that means nothing here is accepted with an
//     Ignored warning; a key neither knows is accepted with an Unknown
//     warning. Neither fails a load. A section neither knows warns once,
//     for the section.
//   - A malformed file, or a value of the wrong type or range, fails the
//     load with an *Error naming the file, the key, and the line where the
//     TOML library gives one.
//   - At most one Setting per flag: two keys for one flag are an error
//     (ErrConflict), except lists (model and enabled_models), which join.
//   - The package only converts: it sets no flag and no environment
//     variable. The caller applies Settings to flags not given on the
//     command line and Env to variables not already in the environment, so
//     both the command line and the environment beat the file.
//
// # Imports
//
// config imports the TOML library and the standard library only; it
// knows serve's flags by name, never the packages behind them.
package config
