"""The documentation: the site builds, the deploy README works as written."""
