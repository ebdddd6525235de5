from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mrtrweb', '0020_servers_people_bring'),
    ]

    operations = [
        migrations.AddField(
            model_name='mcpserver',
            name='disabled_by_admin',
            field=models.BooleanField(default=False, editable=False),
        ),
    ]
