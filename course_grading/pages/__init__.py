"""Pages a submission reaches, made inert: the allow-list, feedback, formgrader's policy."""
