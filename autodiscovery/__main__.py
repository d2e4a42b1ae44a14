from autodiscovery.cli import app

app(prog_name="autodiscovery")
