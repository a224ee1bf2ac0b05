from tokenmill.cli import app

app()
