"""What Fireline costs on AWS: list prices, a request meter for boto3 clients, and a model
turning metered requests and units into dollars per million jobs."""
