__version__ = "0.1.0.dev0"

# The Determined release whose API this one serves. The master reports it as its `version`, so
# clients of that release (which compare it with their own) see a master of their version; our
# own version is reported beside it as `redeterminedVersion`.
REFERENCE_VERSION = "0.37.0"
