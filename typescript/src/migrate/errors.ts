/**
 * The migration's own failures, each a class of its own so a caller (and the CLI's exit
 * status) can tell them apart: a usage error (exit 2), a source or target that is not
 * there or not what its scheme says, an environment that cannot run the harness's
 * packages (exit 1, one line on stderr).
 */

export class MigrationError extends Error {
  override readonly name: string = 'MigrationError'
}

/** The command line is wrong (exit status 2, as argparse's in Python's `berth-migrate`). */
export class MigrationUsageError extends MigrationError {
  override readonly name = 'MigrationUsageError'
}

/** The source (or an export's target) names nothing usable: a missing directory, a file where a directory belongs. */
export class MigrationSourceError extends MigrationError {
  override readonly name = 'MigrationSourceError'
}

/** The harness's packages cannot run here: Node too old, or a peer package not installed. */
export class MigrationEnvironmentError extends MigrationError {
  override readonly name = 'MigrationEnvironmentError'
}
