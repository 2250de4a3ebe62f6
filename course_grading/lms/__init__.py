"""Wing: grades into a learning-management system (Canvas, Moodle), as a file to upload."""
