from django.apps import AppConfig


class ExampleConfig(AppConfig):
    name = "testproject.example"
    label = "example"
